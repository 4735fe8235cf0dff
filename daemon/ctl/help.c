/* help.c: the usage text of every d9ctl subcommand, printed by
 * `d9ctl CMD --help`, `d9ctl help CMD` and (one line each) `d9ctl --help`.
 * Kept in one table so the three never disagree. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "d9ctl.h"

#define PROBES_HELP "  --probes LIST       comma-separated subset of sched,cpu,park,poll,spawn,wake,terminate,longpoll,\n" \
                    "                      or all (every poll, spawn, terminate, park exact, wakes per\n" \
                    "                      --wakes: about +35% CPU per request on a busy server), or default:\n" \
                    "                      sched,cpu,longpoll, no uprobe (parks from switches, polls over\n" \
                    "                      1 ms from samples; no per-poll, spawn, terminate or wake events)\n"
#define WAKES_HELP  "  --wakes MODE        with wake probes: sampled (default: attached 250 ms of every\n" \
                    "                      2.5 s, D9WakeWindowEvent marks the windows) or exact (attached\n" \
                    "                      all the time, about one more trap per request: every wake\n" \
                    "                      through the points attached; status names any not, e.g. a\n" \
                    "                      wake_by_ref that cannot be probed)\n"
#define OFFCPU_HELP "  --offcpu-min T      record off-CPU intervals of at least T (e.g. 1ms, 500us; 0 = all);\n" \
                    "                      shorter ones are only counted (default: d9d's offcpu_min, 1ms)\n"
#define SAMPLES_HELP "  --accept-queues     also sample the accept queues of its listening TCP sockets\n" \
                     "                      (SocketAcceptQueueEvent, every accept_queues_interval, 400ms)\n" \
                     "  --resources-interval T  sample its CPU, memory, faults, switches, threads, fds\n" \
                     "                      and I/O every T (default: d9d's resources_interval, 100ms; 0 = off)\n" \
                     "  --full-on-stall T   with the default set: after a poll of at least T (e.g. 40ms),\n" \
                     "                      the full set's uprobes for d9d's full_window (2s), then none\n" \
                     "                      for full_window_gap (8s); D9ProbesEvent marks each window\n"

static const struct d9ctl_help helps[] = {
        { "attach", "start tracing a running process",
          "usage: d9ctl attach --pid N [--duration D] [--probes LIST] [--wakes MODE] [--offcpu-min T]\n"
          "                    [--accept-queues] [--resources-interval T] [--full-on-stall T]\n"
          "                    [--wait-plan] [--json]\n"
          "\n"
          "Start tracing process N until `d9ctl detach` (or for D, e.g. 30s, 5m) and print\n"
          "the probe plan: which probes attached, which are missing and why. It returns\n"
          "once recording has begun: a binary not planned before is planned meanwhile\n"
          "(\"pending:\"), its uprobes join when the plan is ready, and the trace says when.\n"
          "\n"
          "  --pid N             process to trace\n"
          "  --duration D        stop by itself after D\n"
          PROBES_HELP WAKES_HELP OFFCPU_HELP SAMPLES_HELP
          "  --wait-plan         begin recording only once the plan's probes are attached\n"
          "  --json              print d9d's answer as JSON\n" },
        { "detach", "stop tracing a process and seal its segment",
          "usage: d9ctl detach --pid N\n"
          "\n"
          "Stop tracing process N; its open segment is sealed.\n" },
        { "list", "traced processes (--all: with finished ones)",
          "usage: d9ctl list [--all] [--json]\n"
          "\n"
          "Show the processes being traced: pid, state, service, start time, duration,\n"
          "events, drops and the folder the segments go to.\n"
          "\n"
          "  --all, -a           also show finished sessions (d9d forgets them after an hour)\n"
          "  --json              print d9d's answer as JSON\n" },
        { "status", "short state of d9d and its targets (--verbose: stacks, probe plans)",
          "usage: d9ctl status [--pid N | --all] [--verbose] [--json]\n"
          "\n"
          "One line for d9d, a few per live target: state, events/s (while recording),\n"
          "events, drops, bytes, segments, folder and missing probes. A pid d9d does not\n"
          "know is an error.\n"
          "\n"
          "  --pid N             only this process (also when finished)\n"
          "  --all, -a           also finished sessions\n"
          "  --verbose, -v       also print what became of each target's stacks (unwound,\n"
          "                      failed, cut and why, deep copies) and its probe plan\n"
          "  --json              print d9d's answer (plans included) as JSON\n" },
        { "record", "trace a process or a command for a while, print sealed segments",
          "usage: d9ctl record --pid N [--duration D] [OPTIONS]\n"
          "       d9ctl record [--duration D] [--follow-children] [OPTIONS] -- CMD [ARGS...]\n"
          "\n"
          "Attach, record, wait until every segment is sealed, then print the sealed\n"
          "segment paths on stdout, one per line. Progress goes to stderr: a line that\n"
          "redraws on a terminal, a plain line every 2 s otherwise.\n"
          "With --pid, records until D elapses, the process exits or Ctrl-C.\n"
          "With -- CMD, starts CMD and traces it from its first instruction; records\n"
          "until CMD exits (or D elapses: then CMD is stopped) and exits with CMD's\n"
          "exit status (0 if d9ctl stopped it). CMD's own stdout goes to stderr.\n"
          "\n"
          "  --pid N             process to trace\n"
          "  --duration D        stop after D (e.g. 10s, 500ms, 5m)\n"
          "  --out DIR           copy the sealed segments to DIR/SERVICE/INSTANCE/\n"
          "  --follow-children   CMD is a launcher (shell or npm script, ...): trace the\n"
          "                      first Tokio process it execs or starts\n"
          PROBES_HELP WAKES_HELP OFFCPU_HELP SAMPLES_HELP },
        { "plan", "probe plan for a Tokio binary (no d9d needed)",
          "usage: d9ctl plan (--pid N | --exe PATH) [--json] [--all]\n"
          "\n"
          "Without d9d: show which Tokio functions would be probed in a process or an\n"
          "executable, and what is missing.\n"
          "\n"
          "  --json              the plan as JSON\n"
          "  --all               also list optional poll return sites\n" },
        { "report", "the culprits of a recording: longest polls, blocking, wake delays",
          "usage: d9ctl report [--json] [--top N] SEGMENT...|DIR...\n"
          "\n"
          "Longest polls with worker, task, future type and the stack that ran; blocking\n"
          "inside polls; longest wake-to-poll delays; longest blocking-pool jobs;\n"
          "per-worker busy/parked shares and scheduler wait; lost events and short\n"
          "off-CPU intervals. A directory stands for the trace files directly in it,\n"
          "or for its one recording's (SERVICE/INSTANCE below it, where record puts\n"
          "them). Files are read in version order (trace.2 before trace.10).\n"
          "\n"
          "  --top N             rows per table (default 10, at most 10000)\n"
          "  --json              the report as one JSON document\n" },
        { "export", "a recording as Perfetto (trace event JSON) or pprof",
          "usage: d9ctl export --format perfetto|pprof [--profile cpu|offcpu] --output FILE\n"
          "                    SEGMENT...|DIR...\n"
          "\n"
          "perfetto: trace event JSON that Perfetto's UI, chrome://tracing and Chrome\n"
          "DevTools open: a track per worker with its polls (named by future type) and\n"
          "parks, blocking-pool jobs on their threads, samples and wakes as instants.\n"
          "pprof: a gzipped profile.proto for `go tool pprof`, labelled worker, thread\n"
          "and future. A directory stands for the trace files directly in it, or for\n"
          "its one recording's (SERVICE/INSTANCE below it, where record puts them).\n"
          "Files are read in version order (trace.2 before trace.10).\n"
          "\n"
          "  --format F          perfetto or pprof\n"
          "  --profile P         pprof only: cpu (on-CPU samples, default) or offcpu\n"
          "                      (off-CPU intervals, counted: the trace has no lengths)\n"
          "  --output FILE       where to write ('-' for stdout); written complete or not at all\n" },
        { "dump", "print trace files (raw, .gz, .zst)",
          "usage: d9ctl dump [--summary | --json] [--strict] FILE...|DIR...\n"
          "\n"
          "Decode trace segments and print their events, callchain addresses named from\n"
          "the file's SymbolTableEntry records. A directory stands for its trace files\n"
          "as for report. A torn tail (a segment still being written) is reported and\n"
          "tolerated unless --strict.\n"
          "\n"
          "  --summary           counts per event type and the time span of the events\n"
          "  --json              one JSON object per event\n"
          "  --strict            a torn tail is an error\n" },
        { "symbolize", "name what sealed segments left unnamed, from debug files",
          "usage: d9ctl symbolize [--debug-dir DIR]... [--no-debuginfod] [--timeout T] SEGMENT|FOLDER...\n"
          "\n"
          "Name the frames (\"[unnamed] FILE 0x...\") and task labels (\"0x...\") a segment\n"
          "was sealed without, from debug files found by the build-id d9d recorded for\n"
          "each mapped file: /usr/lib/debug/.build-id/, each DIR (DIR/.build-id/xx/rest.debug\n"
          "or DIR/xx/rest.debug), then the debuginfod servers in $DEBUGINFOD_URLS. Task\n"
          "labels also need the executable (where it ran, or from debuginfod). Each\n"
          "segment is replaced by a new sealed file with the same owner and access;\n"
          "nothing else in it changes. A FOLDER stands for the trace files in it.\n"
          "Prints one line per segment: what was named.\n"
          "\n"
          "  --debug-dir DIR     also look for debug files here (repeatable)\n"
          "  --no-debuginfod     do not ask debuginfod servers\n"
          "  --timeout T         longest wait for one download (default 30s)\n" },
        { "serve", "browse traces in the web viewer",
          "usage: d9ctl serve [--dir DIR | --bucket B [--prefix P] [--endpoint URL]] [--listen ADDR]\n"
          "\n"
          "Serve the web viewer for the traces under DIR (SERVICE/INSTANCE/trace.N.bin)\n"
          "or in an S3 bucket.\n"
          "\n"
          "  --listen ADDR       HOST:PORT, [V6]:PORT, localhost:PORT or PORT (loopback);\n"
          "                      default 127.0.0.1:3000, port 0 picks a free one\n" },
        { "help", "help on a command",
          "usage: d9ctl help [COMMAND]\n" },
        { NULL, NULL, NULL },
};

const struct d9ctl_help *d9ctl_help_for(const char *cmd)
{
        for (const struct d9ctl_help *h = helps; h->name; h++)
                if (!strcmp(h->name, cmd))
                        return h;
        return NULL;
}

void d9ctl_usage(FILE *out)
{
        fprintf(out, "usage: d9ctl [--socket PATH] COMMAND [ARGS...]\n"
                     "       d9ctl help COMMAND | d9ctl COMMAND --help\n\ncommands:\n");
        for (const struct d9ctl_help *h = helps; h->name; h++)
                fprintf(out, "  %-9s %s\n", h->name, h->summary);
        fprintf(out, "\noptions:\n"
                     "  --socket PATH  d9d's control socket (default: $D9_SOCKET, else %s)\n"
                     "  --help         this text; --version: d9ctl's version\n"
                     "\nattach and record also take --offcpu-min T (off-CPU intervals shorter than T\n"
                     "are counted, not recorded; default d9d's offcpu_min, 1ms), --probes LIST,\n"
                     "--accept-queues, --resources-interval T and --full-on-stall T.\n"
                     "\nenvironment:\n"
                     "  D9_SOCKET      control socket when --socket is not given\n"
                     "  D9_VIEWER_DIR  the viewer's web files for serve\n",
                D9CTL_DEFAULT_SOCKET);
}

int d9ctl_help_command(int argc, char **argv)
{
        const struct d9ctl_help *h;

        if (argc < 2) {
                d9ctl_usage(stdout);
                return 0;
        }
        h = d9ctl_help_for(argv[1]);
        if (!h) {
                fprintf(stderr, "d9ctl help: unknown command '%s' (commands: see d9ctl --help)\n", argv[1]);
                return 2;
        }
        fputs(h->text, stdout);
        return 0;
}

bool d9ctl_wants_help(int argc, char **argv)
{
        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--"))
                        return false; /* record -- CMD --help: CMD's option */
                if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
                        return true;
        }
        return false;
}

int d9ctl_usage_error(const char *cmd, const char *fmt, ...)
{
        va_list ap;

        fprintf(stderr, "d9ctl %s: ", cmd);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, " (see d9ctl %s --help)\n", cmd);
        return 2;
}
