# The library's folders as CMake targets (src/*/CMakeLists.txt).
#
# attn_objects(NAME SOURCES...) in a folder's CMakeLists.txt: the OBJECT library attn_NAME_objects
# with the project's include directories and warnings; the folder's own source properties (set in
# the same directory) apply to it. ATTN_OBJECT_TARGETS collects them all (global property).
#
# attn_layer(NAME OBJECTS objs... [DEPENDS layers...] [PUBLIC_LIBS ...] [PRIVATE_LIBS ...]): the
# static library attn_NAME (alias attn::NAME) from those objects, linking the layers below it
# (attn_<layer>) and its own libraries. Only the layers named in DEPENDS, so that a layer that
# calls into one it does not depend on fails to link (tests/layers: every layer linked whole on
# its own), and a program that links attn::core gets neither cairo nor MPI.

function(attn_objects name)
  add_library(attn_${name}_objects OBJECT ${ARGN})
  target_include_directories(attn_${name}_objects PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
  target_link_libraries(attn_${name}_objects PUBLIC OpenMP::OpenMP_CXX)
  target_compile_options(attn_${name}_objects PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wno-unused-parameter>")
  set_property(GLOBAL APPEND PROPERTY ATTN_OBJECT_TARGETS attn_${name}_objects)
endfunction()

function(attn_layer name)
  cmake_parse_arguments(L "" "" "OBJECTS;DEPENDS;PUBLIC_LIBS;PRIVATE_LIBS" ${ARGN})
  set(objects)
  foreach(o ${L_OBJECTS})
    list(APPEND objects $<TARGET_OBJECTS:attn_${o}_objects>)
    # The objects compile against what the layer's users see (include directories, definitions).
    foreach(d ${L_DEPENDS})
      target_link_libraries(attn_${o}_objects PUBLIC attn_${d})
    endforeach()
    target_link_libraries(attn_${o}_objects PUBLIC ${L_PUBLIC_LIBS} PRIVATE ${L_PRIVATE_LIBS})
  endforeach()
  add_library(attn_${name} STATIC ${objects})
  add_library(attn::${name} ALIAS attn_${name})
  set_target_properties(attn_${name} PROPERTIES EXPORT_NAME ${name})  # installed as attn::NAME
  target_include_directories(attn_${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:include>)
  set(deps)
  foreach(d ${L_DEPENDS})
    list(APPEND deps attn_${d})
  endforeach()
  target_link_libraries(attn_${name} PUBLIC ${deps} OpenMP::OpenMP_CXX Threads::Threads
    ${L_PUBLIC_LIBS} PRIVATE ${L_PRIVATE_LIBS})
  set_property(GLOBAL APPEND PROPERTY ATTN_LAYERS ${name})
endfunction()
