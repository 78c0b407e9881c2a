# One LibTorch per build: its headers, libraries and Caffe2 config from the same prefix. Included
# by ConvoyTorch.cmake and, installed beside it, by convoy-torch.cmake, so convoy's build and a
# project using the installed package resolve LibTorch the same way.
#
# Why it is needed: TorchConfig.cmake looks for its Caffe2 config and for libtorch and libc10 with
# PATHS, which CMake searches after the system's folders. With Debian's libtorch-dev installed, a
# Torch_DIR naming the LibTorch of PyPI's torch wheel loaded that wheel's headers and Debian's
# Caffe2 config and libraries, and the link failed far from the cause. Seeding those results from
# the chosen LibTorch's own prefix keeps them together; the check after the search stops a mix
# that comes some other way (a cache written by an earlier configure, say) with both named.

# _convoy_torch_seed(): in the calling function's scope, sets Caffe2_DIR and the library results
# TorchConfig.cmake would search for to those of the LibTorch find_package(Torch) is about to load,
# where it has the layout of an official LibTorch (share/cmake/Torch, lib/libtorch.so: the archive,
# the wheel's torch/ folder, or such a tree installed anywhere). Debian's layout is left alone.
function(_convoy_torch_seed)
  if(Torch_DIR AND EXISTS "${Torch_DIR}/TorchConfig.cmake")
    set(config_dir "${Torch_DIR}")
  elseif(DEFINED ENV{Torch_DIR} AND EXISTS "$ENV{Torch_DIR}/TorchConfig.cmake")
    set(config_dir "$ENV{Torch_DIR}")
  else()
    # The first prefix that has one, in find_package's order (CMAKE_PREFIX_PATH first).
    find_path(config_dir TorchConfig.cmake PATH_SUFFIXES share/cmake/Torch NO_CACHE)
  endif()
  if(NOT config_dir)
    return()
  endif()
  get_filename_component(prefix "${config_dir}/../../.." ABSOLUTE)
  if(NOT EXISTS "${prefix}/lib/libtorch.so" OR NOT EXISTS "${config_dir}/../Caffe2/Caffe2Config.cmake")
    return()
  endif()
  get_filename_component(caffe2_dir "${config_dir}/../Caffe2" ABSOLUTE)
  set(Torch_DIR "${config_dir}" PARENT_SCOPE)
  set(Caffe2_DIR "${caffe2_dir}" PARENT_SCOPE)
  # The variables TorchConfig.cmake's find_library calls fill; a normal variable of that name
  # stands for the search (CMP0125).
  foreach(entry TORCH_LIBRARY=torch c10_LIBRARY=c10 C10_CUDA_LIBRARY=c10_cuda kineto_LIBRARY=kineto)
    string(REPLACE "=" ";" entry "${entry}")
    list(GET entry 0 variable)
    list(GET entry 1 name)
    if(EXISTS "${prefix}/lib/lib${name}.so")
      set(${variable} "${prefix}/lib/lib${name}.so" PARENT_SCOPE)
    endif()
  endforeach()
endfunction()

# _convoy_torch_check_one(): after find_package(Torch) in the same scope. Stops the configure when
# the Caffe2 config or a library LibTorch linked came from outside TORCH_INSTALL_PREFIX, naming
# both installations and Torch_DIR, the variable that picks one.
function(_convoy_torch_check_one)
  get_filename_component(prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
  set(paths "Caffe2 config=${Caffe2_DIR}" "libtorch=${TORCH_LIBRARY}")
  if(c10_LIBRARY)
    list(APPEND paths "libc10=${c10_LIBRARY}")
  endif()
  foreach(target torch torch_cpu c10)
    if(TARGET ${target})
      get_target_property(configurations ${target} IMPORTED_CONFIGURATIONS)
      foreach(configuration IN LISTS configurations)
        get_target_property(location ${target} IMPORTED_LOCATION_${configuration})
        if(location)
          list(APPEND paths "lib${target}=${location}")
        endif()
      endforeach()
    endif()
  endforeach()
  foreach(entry IN LISTS paths)
    string(FIND "${entry}" "=" at)
    string(SUBSTRING "${entry}" 0 ${at} what)
    math(EXPR at "${at} + 1")
    string(SUBSTRING "${entry}" ${at} -1 path)
    get_filename_component(real "${path}" REALPATH)
    string(FIND "${real}/" "${prefix}/" inside)
    if(NOT inside EQUAL 0)
      string(CONCAT message "convoy: two LibTorch installations are mixed in this configure: "
        "TorchConfig.cmake of ${TORCH_INSTALL_PREFIX} (LibTorch ${Torch_VERSION}) took its ${what} "
        "from ${path}, which belongs to another LibTorch. Pick one with -DTorch_DIR=<its "
        "share/cmake/Torch folder> (${TORCH_INSTALL_PREFIX}/share/cmake/Torch for this one), in a "
        "fresh build folder or after deleting CMakeCache.txt, which keeps earlier search results")
      message(FATAL_ERROR "${message}")
    endif()
  endforeach()
endfunction()

# _convoy_torch_link_order(<target>): libstdc++ first among the shared libraries of every program
# that links <target>. The LibTorch of PyPI's wheel and of the official archives exports parts of
# a newer libstdc++ of its own (std::filesystem among them) that call into that newer libstdc++;
# a program whose own calls bound to those copies on Debian 12's older libstdc++ crashed in
# std::filesystem::remove_all. The dynamic linker takes a symbol from the first library that has
# it, in the order they were linked, so libstdc++ listed first answers the program's calls itself.
# --no-as-needed keeps it listed where a toolchain links --as-needed.
function(_convoy_torch_link_order target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang" AND NOT CMAKE_CXX_FLAGS MATCHES "-stdlib=libc\\+\\+")
    # One SHELL: item, kept whole when CMake drops repeated options (convoy::gloo has a group too).
    target_link_options(${target} INTERFACE
      "SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")
  endif()
endfunction()
