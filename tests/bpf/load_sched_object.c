/* load_sched_object OBJ: load a d9_sched object file as d9d's loader would
 * on this kernel (d9_resume_by from the same probe, d9_sched_resumed only
 * where that is the way) and print the way; exit 0 when it loaded. Used by
 * build_without_task_work.sh on an object built from another BTF, which the
 * loader's embedded skeleton cannot take. */
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bpf/bpf_resume.h"

/* Where the named variable lies in the object's .rodata. */
static int rodata_offset(struct bpf_object *obj, const char *name)
{
        struct btf *btf = bpf_object__btf(obj);
        int sec = btf ? btf__find_by_name_kind(btf, ".rodata", BTF_KIND_DATASEC) : -1;
        const struct btf_type *t;
        const struct btf_var_secinfo *v;

        if (sec < 0)
                return -ENOENT;
        t = btf__type_by_id(btf, (__u32)sec);
        v = btf_var_secinfos(t);
        for (int i = 0; i < btf_vlen(t); i++, v++)
                if (strcmp(btf__name_by_offset(btf, btf__type_by_id(btf, v->type)->name_off), name) == 0)
                        return (int)v->offset;
        return -ENOENT;
}

int main(int argc, char **argv)
{
        enum d9_resume_way way = d9_bpf_resume_way();
        struct bpf_object *obj;
        struct bpf_map *ro;
        size_t size;
        char *data;
        int off, err;

        if (argc != 2) {
                fprintf(stderr, "usage: load_sched_object OBJ\n");
                return 2;
        }
        obj = bpf_object__open_file(argv[1], NULL);
        if (!obj) {
                fprintf(stderr, "open %s: %s\n", argv[1], strerror(errno));
                return 1;
        }
        ro = bpf_object__find_map_by_name(obj, ".rodata");
        data = ro ? bpf_map__initial_value(ro, &size) : NULL;
        off = rodata_offset(obj, "d9_resume_by");
        if (!data || off < 0 || (size_t)off + sizeof(__u32) > size) {
                fprintf(stderr, "no d9_resume_by in %s\n", argv[1]);
                return 1;
        }
        memcpy(data + off, &(__u32){ way }, sizeof(__u32));
        bpf_program__set_autoload(bpf_object__find_program_by_name(obj, "d9_sched_resumed"),
                                  way == D9_RESUME_SCHED_EXIT);
        err = bpf_object__load(obj);
        printf("resume way: %s\n", d9_bpf_resume_why());
        if (err)
                fprintf(stderr, "load %s: %s\n", argv[1], strerror(-err));
        bpf_object__close(obj);
        return err ? 1 : 0;
}
