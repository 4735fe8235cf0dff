/* x86_lengths: print the instruction boundaries uprobes/x86_insn.c finds when
 * walking [start, end) of an executable linearly, one "addr len" per line, so
 * check_plan.py can compare them with objdump's. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "uprobes_int.h"

int main(int argc, char **argv)
{
        struct elf_image *img = NULL;
        char *err = NULL;

        if (argc < 4 || (argc - 2) % 2) {
                fprintf(stderr, "usage: x86-lengths EXE START END [START END...]\n");
                return 2;
        }
        if (d9_elf_image_open(argv[1], &img, &err) < 0) {
                fprintf(stderr, "x86-lengths: %s\n", err);
                free(err);
                return 1;
        }
        for (int a = 2; a + 1 < argc; a += 2) {
                uint64_t start = strtoull(argv[a], NULL, 0), end = strtoull(argv[a + 1], NULL, 0);
                const uint8_t *code = d9_elf_vaddr_bytes(img, start, end - start);

                for (uint64_t off = 0; code && off < end - start;) {
                        struct x86_insn in;

                        uprobes_x86_decode(code + off, end - start - off, &in);
                        printf("%" PRIx64 " %d\n", start + off, in.len);
                        if (!in.len)
                                break;
                        off += (uint64_t)in.len;
                }
        }
        d9_elf_image_free(img);
        return 0;
}
