# cmake --install: the static library, the C API's shared library (onepass::onepass_c,
# include/onepass.h), the public headers (with the generated version.h),
# the CMake package (find_package(onepass) -> onepass::onepass) and lib/pkgconfig/onepass.pc
# (onepass_c.pc for the C API).
include(CMakePackageConfigHelpers)

set(ONEPASS_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/onepass CACHE STRING
    "Where the CMake package files are installed (relative to the prefix)")

install(TARGETS onepass onepass_c EXPORT onepassTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/onepass.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/onepass ${PROJECT_BINARY_DIR}/include/onepass
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(EXPORT onepassTargets NAMESPACE onepass:: FILE onepassTargets.cmake
        DESTINATION ${ONEPASS_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/onepassConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/onepassConfig.cmake
                              INSTALL_DESTINATION ${ONEPASS_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the API, so only patch releases are compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/onepassConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/onepassConfig.cmake
              ${PROJECT_BINARY_DIR}/onepassConfigVersion.cmake
        DESTINATION ${ONEPASS_INSTALL_CMAKEDIR})

# pkg-config: relocatable (the prefix is found from the .pc file's own folder). The library
# is static only, so its dependencies are in Requires.private/Libs.private:
# `pkg-config --static --libs onepass`.
file(RELATIVE_PATH onepass_pc_to_prefix
     ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" onepass_pc_to_prefix "${onepass_pc_to_prefix}")
set(ONEPASS_PC_CFLAGS "-DONEPASS_HAVE_CUDA=0")
set(ONEPASS_PC_LIBS_PRIVATE "-pthread")
if(ONEPASS_CUDA)
  set(ONEPASS_PC_CFLAGS "-DONEPASS_HAVE_CUDA=1")
  string(APPEND ONEPASS_PC_LIBS_PRIVATE
         " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -lrt")
  foreach(lib IN LISTS CMAKE_DL_LIBS)
    string(APPEND ONEPASS_PC_LIBS_PRIVATE " -l${lib}")
  endforeach()
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/onepass.pc.in ${PROJECT_BINARY_DIR}/onepass.pc @ONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/onepass_c.pc.in ${PROJECT_BINARY_DIR}/onepass_c.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/onepass.pc ${PROJECT_BINARY_DIR}/onepass_c.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
