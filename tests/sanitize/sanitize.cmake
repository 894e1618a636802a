# sanitize.cmake - the Debug build's test suite under ASan/UBSan (included by tests/CMakeLists.txt in Debug).
# 1. Busted and every `lua5.4` a spec starts run in tests/sanitize/lua.c built with the sanitizers
#    (Debian's lua5.4 cannot load the sanitized module: "ASan runtime does not come first").
# 2. Every sanitizer report of any process of the suite (that interpreter, the cargoship binary,
#    the C tests) is written to <build>/sanitizer/ (log_path), so a report fails the suite even
#    where a spec expects a failing exit: sanitize/reports runs after every test and fails,
#    printing them, when there is one; sanitize/clean empties the directory before.
add_executable(cs_lua ${CMAKE_CURRENT_SOURCE_DIR}/sanitize/lua.c)
target_link_libraries(cs_lua PRIVATE PkgConfig::LUA m)
set_target_properties(cs_lua PROPERTIES OUTPUT_NAME lua5.4 RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/sanitize/bin)
set(LUA54 ${CMAKE_BINARY_DIR}/sanitize/bin/lua5.4)
set(CS_SANITIZER_DIR ${CMAKE_BINARY_DIR}/sanitizer)
set(cs_asan "log_path=${CS_SANITIZER_DIR}/asan:log_exe_name=1:detect_leaks=1:strict_string_checks=1:check_initialization_order=1")
set(CS_SANITIZE_ENV
  "ASAN_OPTIONS=${cs_asan}"
  "UBSAN_OPTIONS=log_path=${CS_SANITIZER_DIR}/ubsan:log_exe_name=1:print_stacktrace=1:halt_on_error=1")

add_test(NAME sanitize/clean COMMAND sh -c "rm -rf \"$0\" && mkdir -p \"$0\"" ${CS_SANITIZER_DIR})
set_tests_properties(sanitize/clean PROPERTIES LABELS "unit;lab" FIXTURES_SETUP sanitize)
add_test(NAME sanitize/reports COMMAND sh -c
  "n=$(find \"$0\" -type f | wc -l); [ \"$n\" -eq 0 ] && { echo 'sanitizers: 0 reports'; exit 0; }; for f in \"$0\"/*; do echo \"== $f\"; head -n 80 \"$f\"; done; echo \"sanitizers: $n reports in $0\"; exit 1"
  ${CS_SANITIZER_DIR})
set_tests_properties(sanitize/reports PROPERTIES LABELS "unit;lab" FIXTURES_CLEANUP sanitize)

# Lab specs the sanitizer pass leaves to the first pass, to keep CI under its hour: the longest
# (measured on a 4-host lab under ASan: install 375 s, firewall 357 s, lock 257 s), whose client
# side runs the same C paths (sessions, exec, sftp) as the specs kept, while the hosts do the work.
# -DCS_SANITIZE_SKIP= runs every one.
set(CS_SANITIZE_SKIP "integration/install;integration/firewall;integration/lock" CACHE STRING
  "lab specs the sanitizer pass does not run (shown as Not Run (Disabled))")

# Unit specs the sanitizer pass leaves to the first pass (issue 23: "the specs that exercise C
# paths"): the configurers', phases' and facts' logic in Lua over fake hosts, whose C paths (the
# loop, child processes) the runtime's own specs and the kept ones run; the lab packages' spec
# (package create, which unit/package runs); the layer lints. Measured under ASan here: ~250 s
# (lock_phases 158 s) of the pass's 1,122 s. Also the lock's and the OpenSSH transport's Lua
# over local child processes (the runtime's proc specs and c/test_proc run those C paths), and
# the config loader's random-input spec (fuzz/yaml runs the YAML reader under ASan 200k times):
# 199 s more. -DCS_SANITIZE_SKIP_UNIT= runs every one.
set(CS_SANITIZE_SKIP_UNIT
  "^unit/(phases|distros|os|facts|lint)/|^unit/(action|lines|lab_distros|lock|transport/openssh|config/fuzz)$" CACHE STRING
  "regex of unit specs the sanitizer pass does not run (shown as Not Run (Disabled))")

# After the whole directory is read: every test gets the environment and waits for sanitize/clean.
function(cs_sanitize_tests)
  get_property(tests DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTY TESTS)
  foreach(t ${tests})
    if(t MATCHES "^sanitize/")
      continue()
    endif()
    # shown as "Not Run (Disabled)", run by the RelWithDebInfo pass: the leak spec runs the specs'
    # Lua under valgrind, which cannot run a sanitized process (ASan's leak check stands in for it
    # here); the lab's self-check, the stand-ins' own spec (python3) and the linters run no
    # sanitized code (the stand-ins' spec alone took 229 s of the 2-core CI's hour)
    if(t STREQUAL "integration/leak" OR t MATCHES "^(lab/selfcheck|lab/standin|lint/)"
       OR t IN_LIST CS_SANITIZE_SKIP OR (CS_SANITIZE_SKIP_UNIT AND t MATCHES "${CS_SANITIZE_SKIP_UNIT}"))
      set_tests_properties(${t} PROPERTIES DISABLED TRUE)
    endif()
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT ${CS_SANITIZE_ENV})
    # The lab specs (time on the hosts, little client CPU; 10x slower mallocs would not fit the
    # unit specs) unwind every allocation in full: libcrypto has no frame pointers, and only a
    # full stack names the libssh2 call a leak of libssh2's own comes from (lsan.supp)
    if(t MATCHES "^integration/")
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=${cs_asan}:fast_unwind_on_malloc=0"
        "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/sanitize/lsan.supp:print_suppressions=0")
    endif()
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT_MODIFICATION "PATH=path_list_prepend:${CMAKE_BINARY_DIR}/sanitize/bin")
    set_property(TEST ${t} APPEND PROPERTY FIXTURES_REQUIRED sanitize)
  endforeach()
endfunction()
cmake_language(DEFER CALL cs_sanitize_tests)
