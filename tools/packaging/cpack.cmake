# CPack: `cpack -G DEB` in the build dir makes fdo_<version>_<arch>.deb from
# the install rules (tools/packaging/CMakeLists.txt), installed under /usr.
# Its maintainer scripts (tools/packaging/debian/) create the fdod user and
# state dir, enable fdod.socket, and keep /var/lib/fdod on removal.
set(CPACK_PACKAGE_NAME fdo)
set(CPACK_PACKAGE_VENDOR "fdo")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "feedback-directed optimization daemon (fdod) and its CLI (fdoctl)")
set(CPACK_PACKAGE_DESCRIPTION
    "fdod compiles LLVM IR programs sent over a Unix socket, runs them in sandboxed workers, \
profiles them and recompiles them with the profile; fdoctl is its command line.")
set(CPACK_PACKAGE_CONTACT "fdo maintainers <fdo@localhost>")
set(CPACK_GENERATOR DEB)
# Absolute destinations (/etc/fdod/fdod.conf) land in the package, not on the
# building host: CPack installs with DESTDIR set, and then under
# CPACK_INSTALL_PREFIX (whatever CMAKE_INSTALL_PREFIX the build has).
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Library dependencies from the binaries (dpkg-shlibdeps), plus systemd for
# the units and the maintainer scripts (systemd-sysusers, systemctl), and
# libjs-chart.js for `fdoctl web`'s charts (/usr/share/javascript/chart.js).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd, libjs-chart.js")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/tools/packaging/debian/postinst
    ${PROJECT_SOURCE_DIR}/tools/packaging/debian/prerm
    ${PROJECT_SOURCE_DIR}/tools/packaging/debian/postrm
    ${PROJECT_SOURCE_DIR}/tools/packaging/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
