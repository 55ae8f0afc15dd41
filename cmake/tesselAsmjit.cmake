# Finds asmjit without a CMake package (Debian's libasmjit-dev ships none) and defines the
# imported target tessel::asmjit. Used by CMakeLists.txt and by the installed tesselConfig.cmake,
# so a consumer finds the asmjit of its own toolchain (host or aarch64-linux-gnu).
#
#   tessel_find_asmjit([GLOBAL] [QUIET])
#
# Cache variables TESSEL_ASMJIT_LIBRARY and TESSEL_ASMJIT_INCLUDE_DIR can be set to override.
# Sets TESSEL_ASMJIT_FOUND in the caller's scope; without QUIET a missing asmjit is fatal.
function(tessel_find_asmjit)
  cmake_parse_arguments(_arg "GLOBAL;QUIET" "" "" ${ARGN})
  if(TARGET tessel::asmjit)
    set(TESSEL_ASMJIT_FOUND TRUE PARENT_SCOPE)
    return()
  endif()
  find_library(TESSEL_ASMJIT_LIBRARY NAMES asmjit DOC "asmjit library (libasmjit-dev)")
  find_path(TESSEL_ASMJIT_INCLUDE_DIR NAMES asmjit/asmjit.h DOC "Directory holding asmjit/asmjit.h")
  if(NOT TESSEL_ASMJIT_LIBRARY OR NOT TESSEL_ASMJIT_INCLUDE_DIR)
    set(TESSEL_ASMJIT_FOUND FALSE PARENT_SCOPE)
    if(NOT _arg_QUIET)
      message(FATAL_ERROR "tessel: asmjit not found (library: ${TESSEL_ASMJIT_LIBRARY}, "
        "header: ${TESSEL_ASMJIT_INCLUDE_DIR}). Debian: apt-get install libasmjit-dev "
        "(libasmjit-dev:arm64 for the AArch64 cross build), or set TESSEL_ASMJIT_LIBRARY and "
        "TESSEL_ASMJIT_INCLUDE_DIR.")
    endif()
    return()
  endif()
  if(_arg_GLOBAL)
    add_library(tessel::asmjit INTERFACE IMPORTED GLOBAL)
  else()
    add_library(tessel::asmjit INTERFACE IMPORTED)
  endif()
  # INTERFACE IMPORTED (not UNKNOWN) so that 3.16 accepts it; the path links as a full path.
  set_target_properties(tessel::asmjit PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${TESSEL_ASMJIT_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${TESSEL_ASMJIT_LIBRARY}")
  set(TESSEL_ASMJIT_FOUND TRUE PARENT_SCOPE)
endfunction()
