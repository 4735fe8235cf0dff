/* The process events d9d samples (docs/process.md): ProcessResourceUsageEvent
 * and SocketAcceptQueueEvent carry exactly the names, field order and type
 * codes of later dial9 revisions (trace-format.md 8.14), so dial9's typed
 * readers take them; D9ProcessResourcesEvent is d9d's own. No annotation
 * frame (the targeted viewer cannot parse one). Values round-trip. */
#include <stdio.h>
#include <string.h>

#include "d9proto.h"
#include "../tap.h"

struct want {
        const char *event;
        const char *fields; /* "name:code,..." */
};

static const struct want wants[] = {
        { "ProcessResourceUsageEvent", "user_cpu_ns:9,system_cpu_ns:9,max_rss_bytes:9,minor_faults:9,major_faults:9,"
          "block_input_ops:9,block_output_ops:9,voluntary_context_switches:9,involuntary_context_switches:9" },
        { "D9ProcessResourcesEvent", "rss_bytes:9,threads:9,open_fds:9,read_bytes:9,write_bytes:9,rchar:9,wchar:9" },
        { "SocketAcceptQueueEvent", "socket_cookie:9,socket_inode:9,ip_version:11,protocol:11,local_addr:4,"
          "local_port:12,pending_connections:13,backlog_limit:13" },
};

struct seen {
        int schemas_ok, events;
        uint64_t user_cpu_ns, wchar, pending, backlog, port;
        char addr[48];
        int annotations;
};

static int on_schema(const struct d9_dec_schema *s, void *ctx)
{
        struct seen *z = ctx;
        char got[512] = "";
        size_t off = 0;

        for (uint16_t i = 0; i < s->nfields; i++)
                off += (size_t)snprintf(got + off, sizeof(got) - off, "%s%s:%u", i ? "," : "", s->fields[i].name,
                                        s->fields[i].type);
        z->annotations += (int)s->nannotations;
        for (size_t i = 0; i < sizeof(wants) / sizeof(wants[0]); i++)
                if (!strcmp(s->name, wants[i].event)) {
                        bool same = s->has_timestamp && !strcmp(got, wants[i].fields);
                        ok(same, "%s: fields, order and codes as specified", s->name);
                        if (!same)
                                printf("#   got  %s\n#   want %s\n", got, wants[i].fields);
                        z->schemas_ok += same;
                }
        return 0;
}

static uint64_t field_u(const struct d9_dec_event *ev, const char *name)
{
        for (uint16_t i = 0; i < ev->schema->nfields; i++)
                if (!strcmp(ev->schema->fields[i].name, name))
                        return ev->values[i].u;
        return UINT64_MAX;
}

static int on_event(const struct d9_dec_event *ev, void *ctx)
{
        struct seen *z = ctx;
        const char *n = ev->schema->name;

        z->events++;
        if (!strcmp(n, "ProcessResourceUsageEvent"))
                z->user_cpu_ns = field_u(ev, "user_cpu_ns");
        else if (!strcmp(n, "D9ProcessResourcesEvent"))
                z->wchar = field_u(ev, "wchar");
        else if (!strcmp(n, "SocketAcceptQueueEvent")) {
                z->pending = field_u(ev, "pending_connections");
                z->backlog = field_u(ev, "backlog_limit");
                z->port = field_u(ev, "local_port");
                for (uint16_t i = 0; i < ev->schema->nfields; i++)
                        if (!strcmp(ev->schema->fields[i].name, "local_addr"))
                                snprintf(z->addr, sizeof(z->addr), "%.*s", (int)ev->values[i].str.len,
                                         ev->values[i].str.p);
        }
        return 0;
}

int main(void)
{
        static uint8_t out[4096];
        struct d9_process_usage u = { .user_cpu_ns = 1230000000, .system_cpu_ns = 40000000, .max_rss_bytes = 1 << 24,
                                      .voluntary_context_switches = 77, .rss_bytes = 1 << 23, .threads = 5,
                                      .open_fds = 41, .wchar = 123456789012ULL };
        struct d9_accept_queue q = { .socket_cookie = 6, .socket_inode = 1944845, .ip_version = 6, .protocol = 6,
                                     .local_addr = "::1", .local_port = 8443, .pending_connections = 17,
                                     .backlog_limit = 16 };
        struct d9_enc *e = NULL;
        struct seen z = { 0 };
        struct d9_dec_opts opts = { .strict = true, .on_event = on_event, .on_schema = on_schema, .ctx = &z };
        struct d9_dec_result res;
        size_t n;

        ok(d9_enc_new(&e) == 0, "encoder");
        d9_enc_set_output(e, out, sizeof(out), NULL, NULL);
        ok(d9_enc_process_usage(e, 1000000000ULL, &u) == 0, "process usage written");
        ok(d9_enc_accept_queue(e, 1000000500ULL, &q) == 0, "accept queue written");
        d9_enc_output(e, &n);
        ok(d9_decode(out, n, &opts, &res) == 0 && z.events == 3, "decodes strictly to 3 events (%d)", z.events);
        ok(z.schemas_ok == 3 && z.annotations == 0, "all three schemas as specified, no annotation frame");
        ok(z.user_cpu_ns == u.user_cpu_ns && z.wchar == u.wchar, "resource values round-trip");
        ok(z.pending == 17 && z.backlog == 16 && z.port == 8443 && !strcmp(z.addr, "::1"),
           "accept-queue values round-trip (%llu/%llu on [%s]:%llu)", (unsigned long long)z.pending,
           (unsigned long long)z.backlog, z.addr, (unsigned long long)z.port);
        d9_enc_free(e);
        return tap_done();
}
