-- Phase "Enable the requested kernel modules" (prepare, --enable-kernel-modules): modules-load.d files and modprobe.
return require("cargoship.phases.lib.prepare_parts").make {
  id = "kernel_modules", title = "Enable the requested kernel modules", env = false, kernel = true,
  option = "enable_kernel_modules" }
