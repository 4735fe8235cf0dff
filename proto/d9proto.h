/* d9proto: the dial9 trace format ("TRC" v1, see shared/docs/trace-format.md).
 *
 * Public API of proto/: a streaming encoder with typed helpers for every
 * dial9 Tokio event, a generic path for our own event types, a decoder for
 * raw / gzip / zstd input, and whole-file compression helpers.
 *
 * All functions returning int return 0 (or a non-negative value where noted)
 * on success and a negative errno on failure. An encoder belongs to one
 * thread at a time; the decoder and the compression helpers are reentrant. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- Field type codes (trace-format.md section 4) ----------------------- */

enum d9_type {
        D9_T_I64 = 1,
        D9_T_F64 = 2,
        D9_T_BOOL = 3,
        D9_T_STRING = 4,
        D9_T_BYTES = 5,
        D9_T_POOLED_STACK = 6,
        D9_T_POOLED_STRING = 7,
        D9_T_STACK = 8,
        D9_T_VARINT = 9,
        D9_T_STRING_MAP = 10,
        D9_T_U8 = 11,
        D9_T_U16 = 12,
        D9_T_U32 = 13,
        D9_T_DYN_LIST = 14,
        D9_T_DYN_MAP = 15,
};
#define D9_T_OPTIONAL 0x80u /* or'ed into a code: one presence byte per event */
#define D9_T_BASE(code) ((uint8_t)((code) & 0x7f))

/* Sentinels of trace-format.md section 8. */
#define D9_WORKER_NONE 255u
#define D9_WORKER_BLOCKING 254u

/* ---- Encoder ------------------------------------------------------------ */

struct d9_enc;

/* Called when the output buffer is full (or on d9_enc_flush): must consume
 * all `len` bytes. Returns 0 or a negative errno, which the encoder passes on. */
typedef int (*d9_enc_flush_fn)(void *ctx, const uint8_t *data, size_t len);

int d9_enc_new(struct d9_enc **out);
void d9_enc_free(struct d9_enc *enc);

/* Output goes to buf[0..cap). With a flush function the encoder hands full
 * buffers to it; without one an event that does not fit returns -ENOSPC and
 * writes nothing: take the bytes with d9_enc_output() and d9_enc_drain().
 * cap must be at least 256 bytes; an event larger than cap fails with -E2BIG.
 * Bytes still pending in the previous buffer are dropped: flush first. The
 * next event after this call starts a new stream (header included), so a
 * segment rotation is just d9_enc_flush() + d9_enc_set_output(). */
void d9_enc_set_output(struct d9_enc *enc, uint8_t *buf, size_t cap,
                       d9_enc_flush_fn flush, void *ctx);
const uint8_t *d9_enc_output(const struct d9_enc *enc, size_t *len);
void d9_enc_drain(struct d9_enc *enc);
int d9_enc_flush(struct d9_enc *enc);

/* Starts a new stream: writes a header and forgets every schema, pool entry
 * and the timestamp base. The first event written starts one implicitly. */
int d9_enc_new_stream(struct d9_enc *enc);

/* Interning: an atom is an encoder-lifetime handle for a string or a call
 * stack. Passing an atom to an event defines its pool entry in the current
 * stream on first use. Interning hashes; events using atoms do not.
 * Atoms stay valid until d9_enc_free (make a new encoder per segment if the
 * set of stacks is unbounded). */
int d9_enc_intern_string(struct d9_enc *enc, const char *s, size_t len, uint32_t *atom);
int d9_enc_intern_stack(struct d9_enc *enc, const uint64_t *addrs, uint32_t n, uint32_t *atom);
size_t d9_enc_atom_count(const struct d9_enc *enc);

/* Generic events: declare a schema once, emit values in field order.
 * The definition is copied. Returns a schema handle (>= 0). */
struct d9_field_def {
        const char *name;
        uint8_t type; /* enum d9_type, optionally | D9_T_OPTIONAL */
};
struct d9_schema_def {
        const char *name;
        uint16_t nfields;
        const struct d9_field_def *fields;
};
int d9_enc_declare(struct d9_enc *enc, const struct d9_schema_def *def);

struct d9_kv {
        const char *key;
        const char *value;
};
struct d9_dyn_elem;
/* One value for the generic path. The member used is chosen by the field's
 * base type; `present` is only read for optional fields. */
struct d9_enc_value {
        bool present;
        union {
                int64_t i64;          /* I64 */
                double f64;           /* F64 */
                bool b;               /* Bool */
                uint64_t u;           /* Varint, U8, U16, U32 */
                uint32_t atom;        /* PooledString, PooledStackFrames */
                struct {
                        const void *data;
                        uint32_t len;
                } bytes;              /* String, Bytes */
                struct {
                        const uint64_t *addrs;
                        uint32_t n;
                } stack;              /* StackFrames */
                struct {
                        const struct d9_kv *kv;
                        uint32_t n;
                } map;                /* StringMap */
                struct {
                        const struct d9_dyn_elem *elems; /* DynamicMap: key, value, key, ... */
                        uint32_t n;                      /* elements (DynamicMap: entries) */
                } dyn;                /* DynamicList, DynamicMap */
        };
};
struct d9_dyn_elem {
        uint8_t type; /* base type, no optional bit, no pooled types */
        struct d9_enc_value v;
};
int d9_enc_event(struct d9_enc *enc, int schema, uint64_t ts, const struct d9_enc_value *vals);

/* dial9 Tokio events: exact names, fields, order and codes of
 * trace-format.md section 8. Schema handles for d9_enc_event: */
enum d9_tokio_schema {
        D9_S_POLL_START,
        D9_S_POLL_END,
        D9_S_WORKER_PARK,
        D9_S_WORKER_UNPARK,
        D9_S_QUEUE_SAMPLE,
        D9_S_TASK_SPAWN,
        D9_S_TASK_TERMINATE,
        D9_S_WAKE,
        D9_S_CPU_SAMPLE,
        D9_S_TASK_DUMP,
        D9_S_CLOCK_SYNC,
        D9_S_SEGMENT_METADATA,
        D9_S_SYMBOL_TABLE_ENTRY,
        /* Later dial9 revisions' process events (trace-format.md 8.14), and
         * d9d's own complement of the first (proto/enc_resources.c). */
        D9_S_PROCESS_RESOURCE_USAGE,
        D9_S_SOCKET_ACCEPT_QUEUE,
        D9_S_PROCESS_RESOURCES,
        D9_S_SAMPLING_STOPPED,
        D9_S_TOKIO_COUNT,
};
#define D9_NO_ATOM UINT32_MAX /* for optional pooled fields: absent */
#define D9_NO_CPU UINT32_MAX

int d9_enc_poll_start(struct d9_enc *enc, uint64_t ts, uint64_t worker_id,
                      uint8_t local_queue, uint64_t task_id, uint32_t spawn_loc);
int d9_enc_poll_end(struct d9_enc *enc, uint64_t ts, uint64_t worker_id);
int d9_enc_worker_park(struct d9_enc *enc, uint64_t ts, uint64_t worker_id,
                       uint8_t local_queue, uint64_t cpu_time_ns, uint32_t tid);
int d9_enc_worker_unpark(struct d9_enc *enc, uint64_t ts, uint64_t worker_id,
                         uint8_t local_queue, uint64_t cpu_time_ns,
                         uint64_t sched_wait_ns, uint32_t tid);
int d9_enc_queue_sample(struct d9_enc *enc, uint64_t ts, uint8_t global_queue);
int d9_enc_task_spawn(struct d9_enc *enc, uint64_t ts, uint64_t task_id,
                      uint32_t spawn_loc, bool instrumented);
int d9_enc_task_terminate(struct d9_enc *enc, uint64_t ts, uint64_t task_id);
int d9_enc_wake(struct d9_enc *enc, uint64_t ts, uint64_t waker_task_id,
                uint64_t woken_task_id, uint8_t target_worker);
/* thread_name may be D9_NO_ATOM (absent), cpu may be D9_NO_CPU (absent). */
int d9_enc_cpu_sample(struct d9_enc *enc, uint64_t ts, uint64_t worker_id,
                      uint32_t tid, uint8_t source, uint32_t thread_name,
                      uint32_t callchain, uint32_t cpu);
int d9_enc_task_dump(struct d9_enc *enc, uint64_t ts, uint64_t task_id, uint32_t callchain);
int d9_enc_clock_sync(struct d9_enc *enc, uint64_t ts, uint64_t realtime_ns);
int d9_enc_segment_metadata(struct d9_enc *enc, uint64_t ts,
                            const struct d9_kv *entries, uint32_t n);
int d9_enc_symbol_entry(struct d9_enc *enc, uint64_t ts, uint64_t addr, uint64_t size,
                        uint32_t symbol_name, uint64_t inline_depth,
                        uint32_t source_file, uint64_t source_line);

/* Process resources (proto/enc_resources.c). Counters are cumulative
 * since the process started, as getrusage(RUSAGE_SELF) reports them. */
struct d9_process_usage {
        /* dial9's ProcessResourceUsageEvent */
        uint64_t user_cpu_ns, system_cpu_ns;
        uint64_t max_rss_bytes;                 /* peak resident set */
        uint64_t minor_faults, major_faults;
        uint64_t block_input_ops, block_output_ops; /* 512-byte units */
        uint64_t voluntary_context_switches, involuntary_context_switches;
        /* d9d's D9ProcessResourcesEvent: what getrusage does not say */
        uint64_t rss_bytes;                     /* resident set now */
        uint64_t threads, open_fds;
        uint64_t read_bytes, write_bytes;       /* storage I/O (/proc/PID/io) */
        uint64_t rchar, wchar;                  /* bytes through read/write syscalls */
};
/* Writes both ProcessResourceUsageEvent (dial9's fields only) and
 * D9ProcessResourcesEvent at ts. */
int d9_enc_process_usage(struct d9_enc *enc, uint64_t ts, const struct d9_process_usage *u);

/* One listening TCP socket's accept queue: dial9's SocketAcceptQueueEvent. */
struct d9_accept_queue {
        uint64_t socket_cookie, socket_inode;
        uint8_t ip_version;                     /* 4 or 6 */
        uint8_t protocol;                       /* IPPROTO_TCP */
        char local_addr[48];                    /* text, as inet_ntop writes it */
        uint16_t local_port;
        uint32_t pending_connections;           /* completed, not yet accepted */
        uint32_t backlog_limit;                 /* the listen() backlog in effect */
};
int d9_enc_accept_queue(struct d9_enc *enc, uint64_t ts, const struct d9_accept_queue *q);

/* A segment's span where a listing reads it cheaply (proto/segment_span.c):
 * written zero after the file's first ClockSyncEvent, filled in place by
 * the sealer. Timestamps are monotonic ns; the wall clock of first_ts is
 * realtime_ns + first_ts - sync_ts. events counts the recorded events
 * (timestamp not 0, this one not included). */
#define D9_SPAN_EVENT "D9SegmentSpanEvent"
/* The compressors flush this many raw bytes on their own, so the span can
 * be read from a compressed file's first few KiB. */
#define D9_SPAN_HEAD_BYTES 4096
struct d9_segment_span {
        uint64_t first_ts, last_ts, events;
        uint64_t sync_ts, realtime_ns;  /* the file's first ClockSyncEvent */
        bool synced;
        size_t values_offset;           /* of first_ts in the raw file */
};
int d9_enc_segment_span(struct d9_enc *enc, uint64_t ts, const struct d9_segment_span *s);
/* From a raw file's first bytes: 0, -ENOENT (no span event: another writer,
 * or an older d9d), -ENODATA (there, not filled: not sealed) or -EBADMSG. */
int d9_segment_span_read(const uint8_t *raw, size_t len, struct d9_segment_span *out);
/* Fills the span event of an uncompressed file open for writing. */
int d9_segment_span_patch(int fd, const struct d9_segment_span *s);

/* A kind of sample ("process_resources", "accept_queues") stopped for the
 * rest of the recording: D9SamplingStoppedEvent, with the errno of the
 * failed read and its text, so the trace says why its series ends. */
int d9_enc_sampling_stopped(struct d9_enc *enc, uint64_t ts, const char *kind, int errnum, const char *reason);

/* ---- Decoder ------------------------------------------------------------ */

struct d9_annotation {
        uint16_t field_index;
        const char *key;   /* NUL-terminated copies */
        const char *value;
};
struct d9_dec_field {
        const char *name; /* NUL-terminated */
        uint8_t type;     /* full code incl. D9_T_OPTIONAL */
};
struct d9_dec_schema {
        uint16_t type_id;
        bool has_timestamp;
        const char *name; /* NUL-terminated */
        uint16_t nfields;
        const struct d9_dec_field *fields;
        uint32_t nannotations;
        const struct d9_annotation *annotations;
};

/* A decoded value. Pointers point into the decoded buffer: valid while the
 * caller keeps that buffer. Containers are walked with d9_value_iter_*. */
struct d9_value {
        uint8_t type;  /* base type */
        bool present;  /* false only for an absent optional field */
        bool resolved; /* pooled types: the pool id was defined */
        uint32_t pool_id;
        union {
                int64_t i64;
                double f64;
                bool b;
                uint64_t u;
                struct {
                        const char *p;
                        uint32_t len;
                } str;   /* String, Bytes, PooledString */
                struct {
                        const uint8_t *le; /* n little-endian u64s, unaligned */
                        uint32_t n;
                } stack; /* StackFrames, PooledStackFrames */
                struct {
                        const uint8_t *body;
                        const uint8_t *end;
                        uint32_t count;
                } container; /* StringMap, DynamicList, DynamicMap */
        };
};
uint64_t d9_value_stack_addr(const struct d9_value *v, uint32_t i);

/* Walks a container's elements: StringMap yields key then value (String),
 * DynamicList each element, DynamicMap key then value. */
struct d9_value_iter {
        const uint8_t *p, *end;
        uint8_t type;
        uint32_t remaining; /* elements left, counting map keys and values */
        uint32_t index;
};
void d9_value_iter_init(struct d9_value_iter *it, const struct d9_value *container);
/* 1 = *out filled, 0 = done. Containers are validated when decoded, so this
 * cannot fail on values handed out by the decoder. */
int d9_value_iter_next(struct d9_value_iter *it, struct d9_value *out);

struct d9_dec_event {
        const struct d9_dec_schema *schema;
        bool has_timestamp;
        uint64_t ts;
        const struct d9_value *values; /* schema->nfields entries */
        size_t offset;                 /* of the event frame */
        uint32_t stream;               /* 0-based stream index in the input */
};

struct d9_dec_opts {
        /* Strict: a truncated tail and references to undefined pool ids are
         * errors. Lenient: decoding stops cleanly at a torn tail. */
        bool strict;
        /* Return non-zero to stop; d9_decode then returns that value. */
        int (*on_event)(const struct d9_dec_event *ev, void *ctx);
        int (*on_schema)(const struct d9_dec_schema *s, void *ctx);
        /* After every whole frame (a stream header included): its first
         * byte (the tag, 0x54 for a header), offset and length. */
        int (*on_frame)(uint8_t tag, size_t offset, size_t len, void *ctx);
        void *ctx;
};

struct d9_dec_result {
        size_t consumed;       /* end of the last whole frame or header */
        size_t error_offset;   /* where the first error was found */
        char error[128];       /* reason, empty if none */
        bool truncated;        /* input ended inside a frame (a torn tail) */
        uint64_t events;
        uint64_t frames;
        uint32_t streams;
};

/* Decodes one raw (uncompressed) buffer. Returns 0 on success (also for a
 * torn tail in lenient mode), -EBADMSG on corrupt input with res->error and
 * res->error_offset set, -ENOMEM, or a callback's non-zero return. */
int d9_decode(const uint8_t *buf, size_t len, const struct d9_dec_opts *opts,
              struct d9_dec_result *res);

/* Copies a raw trace, frame by frame, to out (called with consecutive
 * pieces), replacing the text of string pool entries: replace(text, len,
 * ctx) returns the new text (NUL-terminated, kept by the caller) or NULL to
 * keep it. Every other frame is copied byte for byte, so events, stacks and
 * the pool ids they use are unchanged. A torn tail is dropped (lenient);
 * corrupt input is -EBADMSG with res->error set. */
typedef const char *(*d9_string_replace_fn)(const char *text, uint32_t len, void *ctx);
int d9_rewrite_strings(const uint8_t *buf, size_t len, d9_string_replace_fn replace, void *rctx,
                       d9_enc_flush_fn out, void *octx, struct d9_dec_result *res);

/* Length of the longest prefix of buf that consists of whole frames (0 if
 * buf does not start with a stream header). Crash recovery truncates an
 * `.active` file to this length. */
size_t d9_valid_prefix_len(const uint8_t *buf, size_t len);

/* ---- A growable byte buffer ---------------------------------------------- */

/* One for every component that collects bytes of unknown length (the S3
 * client's bodies, serve's files, d9ctl export's profiles). */
struct d9_buf {
        uint8_t *data;
        size_t len, cap;
};
/* Room for extra more bytes and a NUL after them. 0 or -ENOMEM. */
int d9_buf_reserve(struct d9_buf *b, size_t extra);
/* Appends and keeps the data NUL-terminated (XML and error bodies are read
 * as strings). 0 or -ENOMEM. */
int d9_buf_append(struct d9_buf *b, const void *data, size_t len);
void d9_buf_free(struct d9_buf *b);
/* A malloc'd printf, or NULL without memory: for messages built where the
 * caller may have none left. */
char *d9_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- Whole reads and writes ---------------------------------------------- */

/* Every byte of data to fd, again after EINTR and short writes; to a socket
 * without SIGPIPE (a closed peer is -EPIPE). 0 or a negative errno. */
int d9_write_all(int fd, const void *data, size_t len);
/* Fills buf with len bytes from fd (offset < 0: from fd's position, else
 * pread from offset), stopping early only at end of file. How many bytes,
 * or a negative errno. */
ssize_t d9_read_full(int fd, void *buf, size_t len, off_t offset);
/* Appends what fd holds up to its end to b, NUL-terminated; -EFBIG once
 * that passes limit bytes (a file a target or user controls can be
 * endless), -ENOMEM, or another negative errno. On error b keeps what was
 * read, for b's owner to free. */
int d9_read_all(int fd, struct d9_buf *b, size_t limit);

/* ---- The clock ----------------------------------------------------------- */

/* CLOCK_MONOTONIC, the clock trace timestamps and every deadline use. */
uint64_t d9_now_ns(void);
uint64_t d9_now_ms(void);
/* The calling thread's CPU time. */
uint64_t d9_thread_cpu_ns(void);

/* ---- Compression and input files ---------------------------------------- */

enum d9_compress {
        D9_COMPRESS_NONE,
        D9_COMPRESS_GZIP, /* single gzip member, as dial9's viewer needs */
        D9_COMPRESS_ZSTD,
};
/* Detected from the first bytes: 1f 8b gzip, 28 b5 2f fd zstd, else none. */
enum d9_compress d9_compress_detect(const uint8_t *buf, size_t len);

/* Decompresses (gzip: all members, zstd: all frames) into a malloc'ed
 * buffer; raw input is copied. Output larger than max_out fails with -EFBIG. */
int d9_decompress(const uint8_t *in, size_t len, size_t max_out,
                  uint8_t **out, size_t *out_len);

/* The most raw bytes a compressed trace of in_len bytes may expand to.
 * Segments compress 3-20x; a "bomb" (a few KiB that expand to GiB) is cut
 * off here instead of taking the reader's memory. */
#define D9_DECOMPRESS_RATIO 256u
#define D9_DECOMPRESS_MIN_CAP ((size_t)64 << 20)
size_t d9_decompress_cap(size_t in_len);

/* Reads a trace file of any of the three kinds into a malloc'ed raw buffer;
 * compressed input expanding beyond d9_decompress_cap() is -EFBIG. */
int d9_read_trace_file(const char *path, uint8_t **out, size_t *out_len,
                       enum d9_compress *kind);

/* level 0 = default (gzip 6, zstd 9). */
int d9_compress_buf(const uint8_t *in, size_t len, enum d9_compress kind, int level,
                    uint8_t **out, size_t *out_len);
/* Streams in_path into out_path (created or truncated, fsync'ed before
 * returning). The caller renames into place. */
int d9_compress_file(const char *in_path, const char *out_path,
                     enum d9_compress kind, int level);

const char *d9_type_name(uint8_t code);
