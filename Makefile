# Thin wrapper over CMake, as Neovim does: `make`, `make test`, `make install`.
BUILD ?= build
TYPE ?= RelWithDebInfo
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
# tests at once: the three labs' specs side by side (tests/CMakeLists.txt), and a unit or fuzz spec
TEST_JOBS ?= 4

all: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(TYPE) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_ARGS)

# then the fuzz targets' execs (tests/fuzz/run.sh), which ctest does not show for a passing test
test: all
	cd $(BUILD) && rm -f fuzz/*.execs && { ctest -j$(TEST_JOBS) --output-on-failure $(CTEST_ARGS); rc=$$?; \
	  cat fuzz/*.execs 2>/dev/null; exit $$rc; }

unit: all
	cd $(BUILD) && ctest --output-on-failure -L unit

# the sanitizer pass's lab specs on three labs: interrupt on the third, beside distro_upload on the
# second (the two longest, ~150 s each under ASan) and the session specs on the first
debug:
	$(MAKE) BUILD=build-debug TYPE=Debug CMAKE_ARGS="-DCS_LAB3_SPECS=interrupt" all

# the whole suite against the ASan/UBSan build (tests/sanitize/sanitize.cmake): any report fails it
sanitize: debug
	cd build-debug && ctest --output-on-failure $(CTEST_ARGS)

install: all
	cmake --install $(BUILD)

lint:
	luacheck lua distros tests

clean:
	rm -rf $(BUILD) build-debug

.PHONY: all test unit debug sanitize install lint clean
