/* libfdo: the C API of fdo's client library.
 *
 * A runtime links this (pkg-config --cflags --libs fdo, or find_package(fdo)
 * and target fdo::fdo) to talk to fdod, the feedback-directed optimization
 * daemon: connect with a protocol handshake, register programs, execute them
 * in the daemon and read their profiles. docs/runtimes.md walks through it.
 *
 * Conventions
 * - Every fallible function returns 0 on success and -1 on failure. Its last
 *   parameter `fdo_error** err` may be NULL; otherwise on failure *err is set
 *   to a new error the caller frees with fdo_error_free (on success it is left
 *   untouched).
 * - Strings are NUL-terminated UTF-8. Strings the library returns are owned by
 *   the object they came from unless a function says the caller frees them
 *   (with fdo_string_free).
 * - Only fdo_* symbols are exported; the ABI is versioned by the SONAME
 *   (libfdo.so.1).
 */
#ifndef FDO_FDO_H
#define FDO_FDO_H

#include <stddef.h>
#include <stdint.h>

#if defined(FDO_BUILDING_LIBRARY)
#define FDO_API __attribute__((visibility("default")))
#else
#define FDO_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */

/* The class of a failure: the project's error codes (the daemon's
 * error.data.code names them, e.g. "not_found"). */
typedef enum fdo_error_code {
  FDO_ERR_INVALID_ARGUMENT = 1, /* the caller passed something malformed */
  FDO_ERR_NOT_FOUND,            /* a program, profile or key that does not exist */
  FDO_ERR_ALREADY_EXISTS,
  FDO_ERR_CONFLICT, /* a concurrent change; the caller may retry */
  FDO_ERR_IO,       /* a system call or the connection failed */
  FDO_ERR_CORRUPT,  /* stored data or a reply failed a check */
  FDO_ERR_PARSE,    /* IR or JSON text could not be parsed */
  FDO_ERR_VERIFY,   /* the LLVM verifier rejected the module */
  FDO_ERR_COMPILE,
  FDO_ERR_LINK, /* an unresolved symbol at load time */
  FDO_ERR_TIMEOUT,
  FDO_ERR_CRASHED,            /* the program or a worker died */
  FDO_ERR_RESOURCE_EXHAUSTED, /* a size, memory or rate limit */
  FDO_ERR_PERMISSION_DENIED,
  FDO_ERR_UNSUPPORTED, /* e.g. an incompatible protocol version */
  FDO_ERR_UNAVAILABLE, /* fdod cannot be reached */
  FDO_ERR_PINNED,
  FDO_ERR_INTERNAL
} fdo_error_code;

typedef struct fdo_error fdo_error;

FDO_API fdo_error_code fdo_error_get_code(const fdo_error* e);
/* "not_found", "io", ... */
FDO_API const char* fdo_error_code_name(fdo_error_code code);
/* What went wrong, in words (the daemon's error.message for daemon errors). */
FDO_API const char* fdo_error_message(const fdo_error* e);
/* The JSON-RPC error.code when the daemon answered with an error (e.g. -32602
 * for bad params); 0 when the failure happened on this side (connect, I/O,
 * a malformed reply, bad arguments to a libfdo function). */
FDO_API int64_t fdo_error_rpc_code(const fdo_error* e);
/* The daemon's error.data as JSON text ("null" when it sent none or the
 * failure happened on this side). */
FDO_API const char* fdo_error_data_json(const fdo_error* e);
FDO_API void fdo_error_free(fdo_error* e);

/* ------------------------------------------------------------ connection */

typedef struct fdo_conn fdo_conn;

/* Connects to fdod. socket_path NULL or "" means $FDO_SOCKET, else
 * /run/fdod/fdod.sock. */
FDO_API int fdo_connect(const char* socket_path, fdo_conn** out, fdo_error** err);
/* Closes the connection and frees it; NULL is fine. No call may be in
 * progress on it. */
FDO_API void fdo_close(fdo_conn* conn);

#ifdef __cplusplus
}
#endif

#endif /* FDO_FDO_H */
