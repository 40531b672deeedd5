# Cross-compiling attn for 64-bit ARM Linux with Debian's cross toolchain (g++-aarch64-linux-gnu)
# against the arm64 libraries of a multiarch system (dpkg --add-architecture arm64; see
# scripts/test_aarch64.sh). Programs built this way run under qemu-user:
#   qemu-aarch64 -L /usr/aarch64-linux-gnu build-aarch64/attn_tests
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Headers and libraries from the arm64 packages and the cross sysroot, programs from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# pkg-config must read the arm64 .pc files, not the host's; OpenBLAS's OpenMP build first (its
# pthread build's thread pool spins for minutes under qemu-user; the OpenMP one shares attn's
# OpenMP threads).
set(ENV{PKG_CONFIG_LIBDIR}
    /usr/lib/aarch64-linux-gnu/openblas-openmp/pkgconfig:/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# Tests run through qemu-user (ctest and gtest_discover_tests use this).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
