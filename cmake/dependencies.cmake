# Third-party libraries, all from Debian 12 packages (tools/setup.sh installs them by name).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(Boost 1.74 CONFIG REQUIRED COMPONENTS unit_test_framework)

# OpenBLAS (pthread flavour; Corolla drives it single-threaded from its own pool).
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas NO_DEFAULT_PATH)
find_library(OPENBLAS_LIBRARY NAMES openblas PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread)
if(NOT OPENBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS not found: install libopenblas-pthread-dev (tools/setup.sh does)")
endif()
add_library(corolla::openblas INTERFACE IMPORTED)
target_include_directories(corolla::openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(corolla::openblas INTERFACE ${OPENBLAS_LIBRARY})

# oneDNN runs the prefill GEMM (kernels/cpu/gemm.cpp; why: docs/PERFORMANCE.md, "CPU kernels"). Debian's dnnl
# CMake config asks for OpenCL (its GPU runtime), so find the library directly. Its threading runtime is OpenMP
# (libgomp), which Corolla holds to one thread per calling thread.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(DNNL_LIBRARY dnnl)
if(NOT DNNL_INCLUDE_DIR OR NOT DNNL_LIBRARY)
  message(FATAL_ERROR "oneDNN not found: install libdnnl-dev (tools/setup.sh does)")
endif()
add_library(corolla::dnnl INTERFACE IMPORTED)
target_include_directories(corolla::dnnl INTERFACE ${DNNL_INCLUDE_DIR})
target_link_libraries(corolla::dnnl INTERFACE ${DNNL_LIBRARY} gomp)

# C++ Actor Framework 0.17 (Debian ships no CMake config for it).
find_path(CAF_INCLUDE_DIR caf/all.hpp)
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)
if(NOT CAF_INCLUDE_DIR OR NOT CAF_CORE_LIBRARY OR NOT CAF_IO_LIBRARY)
  message(FATAL_ERROR "CAF not found: install libcaf-dev (tools/setup.sh does)")
endif()
add_library(corolla::caf INTERFACE IMPORTED)
target_include_directories(corolla::caf INTERFACE ${CAF_INCLUDE_DIR})
target_link_libraries(corolla::caf INTERFACE ${CAF_IO_LIBRARY} ${CAF_CORE_LIBRARY} Threads::Threads)

find_package(CapnProto CONFIG REQUIRED)
# OpenSSL 3: TLS on peer links and the private swarms' certificates (libssl, actors/net/peer_tls.cpp,
# actors/trust/swarm_certificates.cpp).
find_package(OpenSSL 3 REQUIRED)
# libsodium: Ed25519 node identities and record signatures (actors/trust/ed25519.cpp).
find_package(PkgConfig REQUIRED)
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET GLOBAL libsodium)
add_library(corolla::sodium ALIAS PkgConfig::SODIUM)
find_package(RocksDB 7 CONFIG REQUIRED)
find_package(tomlplusplus 3 CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)

# PCRE2 (8-bit, with JIT): Unicode-aware regular expressions for the tokenizers' pre-tokenizer split rules.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET GLOBAL libpcre2-8)
add_library(corolla::pcre2 ALIAS PkgConfig::PCRE2)
# ICU (common library only): Unicode normalization (NFC, NFKC, ...) that some tokenizer.json files declare.
pkg_check_modules(ICU_UC REQUIRED IMPORTED_TARGET GLOBAL icu-uc)
add_library(corolla::icu ALIAS PkgConfig::ICU_UC)
# jemalloc: the corolla executable's allocator. Actors allocate for every message (mailbox elements, payloads,
# response handlers); with glibc's malloc a swarm simulation spent ~20% of its time in malloc/free, and the same
# run took 20-25% less time with jemalloc (docs/PERFORMANCE.md, "Simulator").
pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET GLOBAL jemalloc)
add_library(corolla::jemalloc ALIAS PkgConfig::JEMALLOC)
