// Compiled into every executable of a -DFLEXSP_SANITIZE build (CMakeLists.txt), nowhere else.
// Open MPI and PMIx keep allocations until exit by design, so LeakSanitizer would fail every
// process at exit, and with it every MPI test and gtest's test discovery. Address and
// undefined-behaviour checks stay on; ASAN_OPTIONS=detect_leaks=1 brings leak checking back.
// e2e_checkpoint_signals preloads an uninstrumented shim (tests/support/slow_rename.c) ahead
// of the sanitizer's runtime: the link-order check would refuse to start.
extern "C" const char* __asan_default_options() { return "detect_leaks=0:verify_asan_link_order=0"; }
