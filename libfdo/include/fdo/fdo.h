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

/* Frees a string the library returned for the caller to free; NULL is fine. */
FDO_API void fdo_string_free(char* s);

/* The protocol version this library speaks (docs/fdod-protocol.md). */
#define FDO_PROTOCOL_MAJOR 1
#define FDO_PROTOCOL_MINOR 0

/* ------------------------------------------------------------ connection */

/* Threading: a connection may be shared between threads. Calls on one
 * connection are serialised (a mutex; the daemon answers one request at a
 * time per connection), so threads that want to run stages in parallel open
 * a connection each. fdo_close must not race with a call on the same
 * connection. Errors are per call and never shared. */
typedef struct fdo_conn fdo_conn;

/* Connects to fdod and performs the handshake (method `hello`): a daemon of
 * another major protocol version is refused with FDO_ERR_UNSUPPORTED and a
 * message naming both versions. socket_path NULL or "" means $FDO_SOCKET,
 * else /run/fdod/fdod.sock. client_name (NULL: "libfdo") names the runtime in
 * the daemon's view of the connection. */
FDO_API int fdo_connect(const char* socket_path, fdo_conn** out, fdo_error** err);
FDO_API int fdo_connect_as(const char* socket_path, const char* client_name, fdo_conn** out,
                           fdo_error** err);
/* Closes the connection and frees it; NULL is fine. */
FDO_API void fdo_close(fdo_conn* conn);

/* What the handshake learned: the daemon's version ("0.1.0"), its protocol
 * minor version, and whether it offers a capability ("execute",
 * "buffers.base64", ...: hello's result in schemas/methods/hello.json). */
FDO_API const char* fdo_conn_server_version(const fdo_conn* conn);
FDO_API int fdo_conn_protocol_minor(const fdo_conn* conn);
FDO_API int fdo_conn_has_capability(const fdo_conn* conn, const char* name);

/* The longest wait for one reply, in milliseconds (default 300000: compiles
 * and executions happen inside a request). A call that waits longer fails with
 * FDO_ERR_TIMEOUT and closes the connection (a late reply must not pass for the
 * next one's). ms must be 1..31536000000 (a year). */
FDO_API int fdo_conn_set_timeout_ms(fdo_conn* conn, int64_t ms, fdo_error** err);

/* Any method by name with params as JSON text (NULL: {}); *result_json gets
 * the result as JSON text, freed with fdo_string_free. For methods this API
 * has no function for (schemas/methods/). */
FDO_API int fdo_call_json(fdo_conn* conn, const char* method, const char* params_json,
                          char** result_json, fdo_error** err);

/* -------------------------------------------------------------- programs */

typedef enum fdo_ir_format {
  FDO_IR_TEXT = 0,   /* LLVM IR assembly */
  FDO_IR_BITCODE = 1 /* LLVM bitcode */
} fdo_ir_format;

/* A program's id (its initial key) and profile key: 64 hex digits + NUL. */
#define FDO_KEY_SIZE 65

/* Registers a program (program.register). name may be NULL. On success
 * program_id gets the id to execute it by and profile_key (may be NULL) the
 * key its profile is kept under. */
FDO_API int fdo_program_register(fdo_conn* conn, const char* name, const void* ir, size_t ir_size,
                                 fdo_ir_format format, char program_id[FDO_KEY_SIZE],
                                 char profile_key[FDO_KEY_SIZE], fdo_error** err);

/* ------------------------------------------------------ execute in fdod */

/* The type of an argument or a return value. Integer parameters narrower than
 * 32 bits take FDO_I32 values; pointer parameters take FDO_BUFFER. */
typedef enum fdo_type {
  FDO_VOID = 0, /* a return only */
  FDO_I32,
  FDO_I64, /* also a pointer return (the address, in the exec worker) */
  FDO_F32,
  FDO_F64,
  FDO_BUFFER /* an argument only: the index of a buffer in fdo_call.buffers */
} fdo_type;

typedef struct fdo_value {
  fdo_type type;
  union {
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
    size_t buffer;
  } as;
} fdo_value;

/* A buffer's element type. */
typedef enum fdo_elem {
  FDO_ELEM_I8 = 0,
  FDO_ELEM_U8,
  FDO_ELEM_I16,
  FDO_ELEM_U16,
  FDO_ELEM_I32,
  FDO_ELEM_U32,
  FDO_ELEM_I64,
  FDO_ELEM_U64,
  FDO_ELEM_F32,
  FDO_ELEM_F64
} fdo_elem;

/* A buffer passed to a pointer parameter: `count` elements at `data`. */
typedef struct fdo_buffer {
  fdo_elem elem;
  void* data;
  size_t count;
} fdo_buffer;

/* fdo_call.flags */
#define FDO_CALL_COPY_BACK 1u /* write the buffers as the program left them back into data */
/* Send every buffer as a sealed memfd with the request instead of base64 text
 * (fdod with capability "buffers.memfd"; an older fdod fails the call). Without
 * it, buffers of FDO_MEMFD_MIN_BYTES or more go as memfds when fdod offers it. */
#define FDO_CALL_MEMFD 2u
#define FDO_MEMFD_MIN_BYTES 65536u

typedef struct fdo_call {
  const char* entry;
  const fdo_value* args;
  size_t nargs;
  fdo_buffer* buffers;
  size_t nbuffers;
  unsigned flags;
} fdo_call;

/* Runs one stage of a registered program in the daemon (method execute).
 * ret (may be NULL) gets the return value (FDO_VOID for void, and when the
 * program called exit()); stage_json (may be NULL) gets the whole result as
 * JSON text (stage keys, cache outcome, counters, output, exit_status), freed
 * with fdo_string_free. */
FDO_API int fdo_execute(fdo_conn* conn, const char* program_id, const fdo_call* call,
                        fdo_value* ret, char** stage_json, fdo_error** err);

/* The launch of a GPU kernel (docs/gpu.md): grid and block dimensions (a 0
 * in y or z counts as 1), dynamic shared memory, and how many launches to time
 * one after another on the same buffers (0: 1). Or tune_items > 0 instead of
 * grid and block: fdod tunes a grid-stride launch over that many elements
 * once per program, kernel, size and GPU architecture and keeps it in the
 * program's profile. */
typedef struct fdo_gpu_launch {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  uint32_t repeats;
  uint64_t tune_items;
} fdo_gpu_launch;

/* Runs one stage of a registered NVPTX program on the host's GPU: the kernel
 * call->entry with call->args (scalars; FDO_BUFFER for device buffers, copied
 * in and, with FDO_CALL_COPY_BACK, back). Buffers travel inline (fdod takes no
 * memfds for GPU kernels: FDO_CALL_MEMFD is refused). stage_json (may be NULL)
 * gets the whole result, with the kernel's times in stage.gpu. */
FDO_API int fdo_execute_gpu(fdo_conn* conn, const char* program_id, const fdo_call* call,
                            const fdo_gpu_launch* launch, char** stage_json, fdo_error** err);

/* -------------------------------------------------------------- profiles */

/* The profile under profile_key (profile.get; version 0: the current one) and
 * its retained versions (profile.history), as JSON text freed with
 * fdo_string_free (schemas/methods/profile.get.json, profile.history.json). */
FDO_API int fdo_profile_get(fdo_conn* conn, const char* profile_key, int64_t version, char** json,
                            fdo_error** err);
FDO_API int fdo_profile_history(fdo_conn* conn, const char* profile_key, char** json,
                                fdo_error** err);

/* -------------------------------------------------- in-process execution */

/* Runs a program's compiled code inside this process (docs/runtimes.md,
 * "In-process execution"): the library leases the program's current output
 * from fdod (a sealed memfd over the socket), links it here, and hands back
 * entries called natively. Counts flow back to fdod in batches; when fdod
 * rewrites the profile the library links the newer code and swaps it in, and
 * the old code is unloaded once no call is inside it any more. */
typedef struct fdo_inproc fdo_inproc;

typedef enum fdo_inproc_flushing {
  FDO_INPROC_FLUSH_BACKGROUND = 0, /* a library thread flushes every flush_interval_ms */
  FDO_INPROC_FLUSH_MANUAL = 1      /* only fdo_inproc_flush (and fdo_inproc_close) */
} fdo_inproc_flushing;

typedef struct fdo_inproc_options {
  fdo_inproc_flushing flushing;
  uint32_t flush_interval_ms; /* 0: 200 */
  uint32_t time_every;        /* time one call in this many per thread; 0: 64 */
} fdo_inproc_options;

typedef struct fdo_inproc_flush_result {
  uint32_t batches;        /* batches sent (0: no calls since the last flush) */
  int stale;               /* fdod has a newer profile than the running code's */
  int swapped;             /* newer code was linked and swapped in */
  uint64_t generation;     /* the generation running after the flush (1, 2, ...) */
  int64_t profile_version; /* the profile's version as fdod last reported it */
} fdo_inproc_flush_result;

/* Leases and links the program's current output. `program` is the id
 * program.register returned; `entries` the n_entries entry names to call.
 * options NULL: background flushing every 200 ms. The connection must stay
 * open until fdo_inproc_close (the lease belongs to it); the library's daemon
 * calls take the connection's lock. */
FDO_API int fdo_inproc_open(fdo_conn* conn, const char* program, const char* const* entries,
                            size_t n_entries, const fdo_inproc_options* options, fdo_inproc** out,
                            fdo_error** err);
/* The index of an entry named at open, for fdo_inproc_call. */
FDO_API int fdo_inproc_entry(const fdo_inproc* inproc, const char* name, size_t* index,
                             fdo_error** err);
/* Calls entry `entry` with the thunk ABI (docs/jit.md): one 8-byte slot per
 * parameter in args (integers and pointers as themselves, floats and doubles
 * by their bits), the result in *ret (ret may be NULL for void entries).
 * Thread-safe; the call holds the code it runs until it returns. Returns 0,
 * or -1 without calling when inproc is NULL or entry is out of range. */
FDO_API int fdo_inproc_call(const fdo_inproc* inproc, size_t entry, uint64_t* args, uint64_t* ret);
/* Sends the counts since the last flush and swaps in newer code when fdod
 * has it. result may be NULL. Thread-safe. */
FDO_API int fdo_inproc_flush(fdo_inproc* inproc, fdo_inproc_flush_result* result, fdo_error** err);
/* A hold on the code running now, for a run of calls from one thread (a
 * query, a batch): its calls skip the per-call reference fdo_inproc_call
 * takes and are counted in the hold, reported when it is closed. A swap does
 * not reach a hold: it keeps running (and keeps linked) the code it started
 * with, so close holds at the runtime's safe points, and within 50 ms of a
 * swap for their calls to be reported. Not thread-safe; one per thread. */
typedef struct fdo_inproc_hold fdo_inproc_hold;
FDO_API int fdo_inproc_hold_open(const fdo_inproc* inproc, fdo_inproc_hold** out, fdo_error** err);
/* As fdo_inproc_call. */
FDO_API int fdo_inproc_hold_call(fdo_inproc_hold* hold, size_t entry, uint64_t* args,
                                 uint64_t* ret);
FDO_API uint64_t fdo_inproc_hold_generation(const fdo_inproc_hold* hold);
/* Reports the hold's calls and lets its code go; NULL is fine. Before
 * fdo_inproc_close. */
FDO_API void fdo_inproc_hold_close(fdo_inproc_hold* hold);
/* Native entries (docs/runtimes.md, "Native entries"): real function
 * pointers of each entry's own C signature, for one thread. The thread
 * keeps the code it got them from until its next quiescent point: call
 * fdo_inproc_thread_quiescent where the thread runs none of the code and
 * keeps none of the pointers (between batches, queries, trace runs); a swap
 * reaches the thread there, and the older code is unloaded once every thread
 * that had it has passed one. No reference count or shared atomic per call.
 * Not thread-safe: one per thread; close it before fdo_inproc_close. */
typedef struct fdo_inproc_thread fdo_inproc_thread;
FDO_API int fdo_inproc_thread_open(const fdo_inproc* inproc, fdo_inproc_thread** out,
                                   fdo_error** err);
/* The entry's function in this thread's code, to be cast to the entry's C
 * type (e.g. int64_t (*)(int64_t)); NULL when entry is out of range. Valid
 * until the thread's next fdo_inproc_thread_quiescent that returns 1, or
 * fdo_inproc_thread_close. Calls through it are counted by
 * fdo_inproc_thread_count. */
FDO_API void* fdo_inproc_thread_entry(const fdo_inproc_thread* thread, size_t entry);
/* A quiescent point: hands the thread's counts over and picks up newer code.
 * Returns 1 when the entries' functions changed (get them again), 0 when not,
 * -1 for NULL. Cheap when nothing was swapped: one load. */
FDO_API int fdo_inproc_thread_quiescent(fdo_inproc_thread* thread);
/* The per-call form, for a call at a time: a quiescent point when newer code
 * was swapped in since the thread's last one, one call of `entry` counted,
 * and the entry's function returned (NULL when out of range). The pointer is
 * for this one call. */
FDO_API void* fdo_inproc_thread_next(fdo_inproc_thread* thread, size_t entry);
/* Tells the library of calls made through fdo_inproc_thread_entry pointers
 * (calls), and of the time of those the runtime timed (timed_calls of them,
 * timed_ns in all; 0 and 0 when it timed none). Kept per thread, handed over
 * at quiescent points; fdod gets them with the next flush. */
FDO_API void fdo_inproc_thread_count(fdo_inproc_thread* thread, size_t entry, uint64_t calls,
                                     uint64_t timed_calls, uint64_t timed_ns);
/* The code this thread runs: its generation, fdo_code_mode and profile
 * version (0, -1 and 0 for NULL). */
FDO_API uint64_t fdo_inproc_thread_generation(const fdo_inproc_thread* thread);
FDO_API int fdo_inproc_thread_mode(const fdo_inproc_thread* thread);
FDO_API int64_t fdo_inproc_thread_profile_version(const fdo_inproc_thread* thread);
/* Hands the thread's counts over and lets its code go; NULL is fine. */
FDO_API void fdo_inproc_thread_close(fdo_inproc_thread* thread);
/* Threads that have passed no quiescent point since newer code was swapped
 * in, and the older code they keep linked (a thread that never passes one
 * keeps it linked for good: nothing is unloaded under it). */
typedef struct fdo_inproc_lag {
  uint32_t threads;          /* open threads behind the running generation */
  uint32_t generations_held; /* older generations still linked */
  uint64_t oldest_ms;        /* the longest any of those threads has been behind */
} fdo_inproc_lag;
FDO_API int fdo_inproc_lagging(const fdo_inproc* inproc, fdo_inproc_lag* out, fdo_error** err);
/* The generation running now: 1 after open, +1 per swap (0 for NULL). */
FDO_API uint64_t fdo_inproc_generation(const fdo_inproc* inproc);
/* How the running generation's code was compiled. */
typedef enum fdo_code_mode {
  FDO_CODE_PLAIN = 0,
  FDO_CODE_INSTRUMENTED = 1, /* counts its branches; the profile is still being gathered */
  FDO_CODE_OPTIMIZED = 2     /* optimized with the profile */
} fdo_code_mode;
/* The running generation's fdo_code_mode, or -1 for NULL. */
FDO_API int fdo_inproc_mode(const fdo_inproc* inproc);
/* The profile version the running generation was compiled with (0: none
 * yet; 0 for NULL). fdo_inproc_flush_result.profile_version is fdod's
 * newest, which runs here once the flush that learns of it swaps it in. */
FDO_API int64_t fdo_inproc_profile_version(const fdo_inproc* inproc);
/* Whether fdod samples this process's threads in the leased code, as JSON
 * text freed with fdo_string_free (NULL for NULL): {"available", "reason",
 * "threads", "events", ..., "last_submit": what the last flush's samples
 * were, or null}. docs/runtimes.md, "Sampling in-process code". */
FDO_API char* fdo_inproc_sampling_json(const fdo_inproc* inproc);
/* Which variant of the program the running code is and why, as JSON text
 * freed with fdo_string_free (NULL for NULL). fdod's guard plans each lease
 * (docs/runtimes.md, "Guarded leases"): {"guarded": true, "role":
 * "incumbent" | "candidate" | "current", "name": "plain O2" | "v3 profiled
 * O2" | ..., "reason", "counted": whether the last stage went into a trial,
 * "trial": its progress or verdict (or null), "renew"}. While a trial runs,
 * flushes switch between its two arms (both stay linked); after its verdict
 * the kept variant runs. */
FDO_API char* fdo_inproc_variant_json(const fdo_inproc* inproc);
/* Stops the flusher, flushes, releases the lease and unloads the code. No
 * call may be running or start. NULL is fine. */
FDO_API void fdo_inproc_close(fdo_inproc* inproc);

#ifdef __cplusplus
}
#endif

#endif /* FDO_FDO_H */
