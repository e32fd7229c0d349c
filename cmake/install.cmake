# What `cmake --install` puts under the prefix:
#   include/snccl/{nccl.h,snccl.h}
#   <libdir>/libsnccl.so*                          the library (SONAME libsnccl.so.0)
#   <libdir>/snccl/libnccl.so*                     the drop-in (SONAME libnccl.so.2); in its own
#                                                  directory so it never shadows a system NCCL:
#                                                  opt in with LD_LIBRARY_PATH=<prefix>/<libdir>/snccl
#   <libdir>/cmake/snccl/                          find_package(snccl): snccl::snccl, snccl::nccl
#   <libdir>/pkgconfig/snccl.pc                    pkg-config --cflags --libs snccl
#   bin/sn_info, sn_topo, sn_*_perf                (their install rules live with the targets)
# Everything is relocatable: `cmake --install build --prefix DIR` works for any DIR.
install(DIRECTORY include/snccl DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Consumers may write <snccl/nccl.h> or, as NCCL programs do, <nccl.h>.
target_include_directories(snccl INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/snccl>)
target_include_directories(snccl_nccl INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/snccl>)

install(TARGETS snccl EXPORT snccl-targets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS snccl_nccl EXPORT snccl-targets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/snccl)
set_target_properties(snccl_nccl PROPERTIES EXPORT_NAME nccl)

set(_snccl_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/snccl)
install(EXPORT snccl-targets NAMESPACE snccl:: DESTINATION ${_snccl_cmakedir})
configure_package_config_file(cmake/snccl-config.cmake.in ${PROJECT_BINARY_DIR}/snccl-config.cmake
                              INSTALL_DESTINATION ${_snccl_cmakedir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/snccl-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/snccl-config.cmake ${PROJECT_BINARY_DIR}/snccl-config-version.cmake
        DESTINATION ${_snccl_cmakedir})

# pkg-config: the prefix is found from the .pc file's own location (relocatable).
file(RELATIVE_PATH SNCCL_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" SNCCL_PC_TO_PREFIX "${SNCCL_PC_TO_PREFIX}")
configure_file(cmake/snccl.pc.in ${PROJECT_BINARY_DIR}/snccl.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/snccl.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
