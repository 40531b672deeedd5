# Installs an already-built attn tree into a scratch prefix and builds tests/package/consumer
# against the installed copy: with find_package(attn) and with a pkg-config command line.
#   cmake -DSRC=<attn source> -DBIN=<attn build> -DWORK=<scratch dir> [-DCXX=g++]
#         [-DBUILD_TYPE=Release] [-DSUBDIR=ON] -P tests/package/run_consumer.cmake
# SUBDIR=ON adds the add_subdirectory() variant (it compiles the library again: minutes).
foreach(var SRC BIN WORK)
  if(NOT ${var})
    message(FATAL_ERROR "run_consumer: -D${var}=... is required")
  endif()
endforeach()
if(NOT CXX)
  set(CXX c++)
endif()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()
set(consumer ${SRC}/tests/package/consumer)
set(prefix ${WORK}/prefix)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "run_consumer: ${what} failed (${rc}):\n${ARGN}\n${out}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

# The consumer prints "... OK" after checking its results itself; make sure it did.
function(check_output what exe)
  run("${what}: running the consumer" ${exe})
  if(NOT out MATCHES "attn consumer sdpa=1\\.66047[0-9] expected=1\\.660477 matmul=4 png=96x64 OK")
    message(FATAL_ERROR "run_consumer: ${what}: unexpected output:\n${out}")
  endif()
  message(STATUS "${what}: ${out}")
endfunction()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# ---- install ----------------------------------------------------------------------------------
run("cmake --install" ${CMAKE_COMMAND} --install ${BIN} --prefix ${prefix})
file(GLOB_RECURSE pc_files ${prefix}/*/attn.pc)
file(GLOB_RECURSE config_files ${prefix}/*/attnConfig.cmake)
file(GLOB_RECURSE libs ${prefix}/*/libattn.a)
foreach(f include/attn/attn.h include/attn/attention.h bin/attn)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "run_consumer: ${prefix}/${f} was not installed")
  endif()
endforeach()
if(NOT pc_files OR NOT config_files OR NOT libs)
  message(FATAL_ERROR "run_consumer: attn.pc, attnConfig.cmake or libattn.a missing under ${prefix}")
endif()

# ---- find_package -----------------------------------------------------------------------------
set(fp ${WORK}/find_package)
run("find_package: configure" ${CMAKE_COMMAND} -S ${consumer} -B ${fp}
  -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
file(STRINGS ${fp}/CMakeCache.txt attn_dir REGEX "^attn_DIR:")
string(FIND "${attn_dir}" "${prefix}/" at)
if(NOT at GREATER -1)
  message(FATAL_ERROR "run_consumer: find_package found attn outside ${prefix}: ${attn_dir}")
endif()
run("find_package: build" ${CMAKE_COMMAND} --build ${fp})
check_output("find_package" ${fp}/consumer)
# attn::core alone: tensors and attention without the upper layers' libraries.
run("find_package: core consumer" ${fp}/consumer_core)
if(NOT out MATCHES "attn core consumer sdpa=1\\.66047[0-9] expected=1\\.660477 matmul=4 OK")
  message(FATAL_ERROR "run_consumer: core consumer: unexpected output:\n${out}")
endif()
file(GLOB_RECURSE core_link ${fp}/CMakeFiles/consumer_core.dir/link.txt)
file(READ ${core_link} core_link_line)
foreach(lib cairo pcre2 mpi libattn.a libattn_plot libattn_data)
  string(FIND "${core_link_line}" "${lib}" at)
  if(at GREATER -1)
    message(FATAL_ERROR "run_consumer: attn::core's link line names ${lib}:\n${core_link_line}")
  endif()
endforeach()
message(STATUS "core consumer: ${out}")

# ---- pkg-config -------------------------------------------------------------------------------
list(GET pc_files 0 pc)
get_filename_component(pc_dir ${pc} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
run("pkg-config" pkg-config --cflags --libs --static attn)
string(STRIP "${out}" flags)
message(STATUS "pkg-config --cflags --libs --static attn: ${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")
file(MAKE_DIRECTORY ${WORK}/pkg-config)
run("pkg-config: build" ${CXX} -std=c++20 -O2 ${consumer}/main.cpp ${flags}
  -o ${WORK}/pkg-config/consumer)
check_output("pkg-config" ${WORK}/pkg-config/consumer)

# ---- add_subdirectory (optional: rebuilds the library) ----------------------------------------
if(SUBDIR)
  set(sd ${WORK}/add_subdirectory)
  run("add_subdirectory: configure" ${CMAKE_COMMAND} -S ${consumer} -B ${sd}
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DATTN_SOURCE_DIR=${SRC})
  run("add_subdirectory: build" ${CMAKE_COMMAND} --build ${sd} -j2)
  check_output("add_subdirectory" ${sd}/consumer)
endif()
message(STATUS "run_consumer: all variants passed")
