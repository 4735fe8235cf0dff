/* x86_insn: an x86-64 instruction length decoder, plus the one question a
 * probe plan asks of an instruction: will the kernel emulate it or single-step
 * it out of line?
 *
 * The length decoder covers the general-purpose, x87, SSE and VEX/EVEX
 * encodings compilers emit, which is what walking a function body for its
 * `ret`s needs. The class mirrors arch/x86/kernel/uprobes.c: the kernel
 * emulates `push %reg` (optionally with REX.B), relative `jmp`/`call`/`jcc`
 * without an operand-size prefix, and its own preferred nop encodings; every
 * other instruction, `ret` included, is copied to the XOL area and
 * single-stepped, ~15x the cost of an emulated hit. */
#include <stdio.h>
#include <string.h>

#include "uprobes_int.h"

/* One-byte opcodes that take a ModRM byte (bit set = yes). */
static bool op1_has_modrm(uint8_t op)
{
        if (op < 0x40)
                return (op & 7) < 4;
        switch (op) {
        case 0x62: case 0x63: case 0x69: case 0x6b:
        case 0xc0: case 0xc1: case 0xc4: case 0xc5: case 0xc6: case 0xc7:
        case 0xd0: case 0xd1: case 0xd2: case 0xd3:
        case 0xf6: case 0xf7: case 0xfe: case 0xff:
                return true;
        }
        return (op >= 0x80 && op <= 0x8f) || (op >= 0xd8 && op <= 0xdf);
}

/* Immediate bytes of a one-byte opcode; osz = operand size (2, 4 or 8). */
static int op1_imm(uint8_t op, int osz, uint8_t modrm_reg)
{
        int z = osz == 2 ? 2 : 4;

        if (op < 0x40 && (op & 7) == 4)
                return 1;
        if (op < 0x40 && (op & 7) == 5)
                return z;
        if ((op >= 0x70 && op <= 0x7f) || (op >= 0xb0 && op <= 0xb7) || (op >= 0xe0 && op <= 0xe7))
                return 1;
        if (op >= 0xb8 && op <= 0xbf)
                return osz == 8 ? 8 : z;
        switch (op) {
        case 0x6a: case 0x6b: case 0x80: case 0x83: case 0xa8: case 0xc0: case 0xc1:
        case 0xc6: case 0xcd: case 0xeb:
                return 1;
        case 0x68: case 0x69: case 0x81: case 0xa9: case 0xc7:
                return z;
        case 0xe8: case 0xe9: /* near branches: rel32 whatever the operand size */
                return 4;
        case 0xc2: case 0xca:
                return 2;
        case 0xc8:
                return 3;
        case 0xf6:
                return modrm_reg < 2 ? 1 : 0;
        case 0xf7:
                return modrm_reg < 2 ? z : 0;
        }
        return 0;
}

static bool op0f_has_modrm(uint8_t op)
{
        switch (op) {
        case 0x05: case 0x06: case 0x07: case 0x08: case 0x09: case 0x0b: case 0x0e:
        case 0x30: case 0x31: case 0x32: case 0x33: case 0x34: case 0x35: case 0x37:
        case 0x77: case 0xa0: case 0xa1: case 0xa2: case 0xa8: case 0xa9: case 0xaa:
                return false;
        }
        return !(op >= 0x80 && op <= 0x8f) && !(op >= 0xc8 && op <= 0xcf);
}

static int op0f_imm(uint8_t op)
{
        if (op >= 0x80 && op <= 0x8f)
                return 4;
        switch (op) {
        case 0x70: case 0x71: case 0x72: case 0x73: case 0xa4: case 0xac: case 0xba:
        case 0xc2: case 0xc4: case 0xc5: case 0xc6:
                return 1;
        }
        return 0;
}

/* Length of ModRM + SIB + displacement starting at p; 0 if truncated. */
static int modrm_len(const uint8_t *p, size_t n)
{
        int mod, rm, len = 1;

        if (n < 1)
                return 0;
        mod = p[0] >> 6;
        rm = p[0] & 7;
        if (mod != 3 && rm == 4) {
                if (n < 2)
                        return 0;
                len++;
                if (mod == 0 && (p[1] & 7) == 5)
                        len += 4;
        }
        if (mod == 0 && rm == 5)
                len += 4;
        else if (mod == 1)
                len += 1;
        else if (mod == 2)
                len += 4;
        return (size_t)len <= n ? len : 0;
}

/* The kernel's preferred nops (x86_nops[] for 64-bit), which it emulates. */
static bool is_kernel_nop(const uint8_t *p, int len)
{
        static const uint8_t nops[][9] = {
                { 0 },
                { 0x90 },
                { 0x66, 0x90 },
                { 0x0f, 0x1f, 0x00 },
                { 0x0f, 0x1f, 0x40, 0x00 },
                { 0x0f, 0x1f, 0x44, 0x00, 0x00 },
                { 0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00 },
                { 0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00 },
                { 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00 },
        };

        return len >= 1 && len <= 8 && memcmp(p, nops[len], (size_t)len) == 0;
}

struct prefixes {
        int n;          /* legacy prefix bytes */
        bool opsize, rex_w, other;
        int rex;        /* 0 or the REX byte */
};

static int read_prefixes(const uint8_t *p, size_t n, struct prefixes *px)
{
        size_t i = 0;

        memset(px, 0, sizeof(*px));
        for (; i < n; i++) {
                uint8_t b = p[i];

                if (b == 0x66)
                        px->opsize = true;
                else if (b == 0xf0 || b == 0xf2 || b == 0xf3 || b == 0x2e || b == 0x3e ||
                         b == 0x26 || b == 0x36 || b == 0x64 || b == 0x65 || b == 0x67)
                        px->other = true;
                else
                        break;
        }
        px->n = (int)i;
        if (i < n && (p[i] & 0xf0) == 0x40) {
                px->rex = p[i];
                px->rex_w = p[i] & 8;
                i++;
        }
        return (int)i;
}

/* VEX (c4/c5) and EVEX (62): prefix bytes, opcode map, then opcode+ModRM. */
static int decode_vex(const uint8_t *p, size_t n, int at)
{
        uint8_t lead = p[at];
        int map, pre = lead == 0xc5 ? 2 : lead == 0xc4 ? 3 : 4;

        if ((size_t)(at + pre + 2) > n)
                return 0;
        map = lead == 0xc5 ? 1 : (p[at + 1] & (lead == 0x62 ? 0x7 : 0x1f));
        int op_at = at + pre;
        uint8_t op = p[op_at];
        if (map == 1 && op == 0x77) /* vzeroupper/vzeroall: no ModRM */
                return op_at + 1;
        int m = modrm_len(p + op_at + 1, n - (size_t)op_at - 1);
        if (!m)
                return 0;
        int imm = map == 3 || (map == 1 && op0f_imm(op) == 1) ? 1 : 0;
        return op_at + 1 + m + imm;
}

/* Every instruction decoded gets its class name: no printf on this path
 * (whole function bodies are swept, see plan_complete.c). */
static void set_what(struct x86_insn *out, const char *what)
{
        size_t n = strlen(what);

        if (n >= sizeof(out->what))
                n = sizeof(out->what) - 1;
        memcpy(out->what, what, n);
        out->what[n] = 0;
}

static void classify(const uint8_t *p, const struct prefixes *px, int op_at, struct x86_insn *out)
{
        uint8_t op = p[op_at];

        out->cls = PROBE_INSN_SSTEP;
        if (is_kernel_nop(p, out->len)) {
                out->cls = PROBE_INSN_EMULATED;
                set_what(out, "nop");
                return;
        }
        if (op >= 0x50 && op <= 0x57 && px->n == 0 && (!px->rex || px->rex == 0x41)) {
                out->cls = PROBE_INSN_EMULATED;
                set_what(out, "push %reg");
                return;
        }
        if ((out->is_jmp_rel || out->is_call_rel || (op >= 0x70 && op <= 0x7f) ||
             (op == 0x0f && p[op_at + 1] >= 0x80 && p[op_at + 1] <= 0x8f)) && !px->opsize) {
                out->cls = PROBE_INSN_EMULATED;
                set_what(out, out->is_call_rel ? "call rel" : "jmp rel");
                return;
        }
        if (out->is_ret)
                set_what(out, "ret");
        else if (op == 0x0f && out->len >= op_at + 3 && p[op_at + 1] == 0x1e && p[op_at + 2] == 0xfa)
                set_what(out, "endbr64");
        else if (op == 0x68 || op == 0x6a)
                set_what(out, "push $imm");
        else if ((op == 0x81 || op == 0x83) && ((p[op_at + 1] >> 3) & 7) == 5)
                set_what(out, "sub $imm");
        else if (op >= 0x88 && op <= 0x8b)
                set_what(out, "mov");
        else if (op == 0x8d)
                set_what(out, "lea");
        else {
                static const char hex[] = "0123456789abcdef";

                set_what(out, "op xx");
                out->what[3] = hex[op >> 4];
                out->what[4] = hex[op & 15];
        }
}

void uprobes_x86_decode(const uint8_t *p, size_t n, struct x86_insn *out)
{
        struct prefixes px;
        int at, len, osz;

        memset(out, 0, sizeof(*out));
        at = read_prefixes(p, n, &px);
        if ((size_t)at >= n)
                return;
        osz = px.rex_w ? 8 : px.opsize ? 2 : 4;
        uint8_t op = p[at];

        if ((op == 0xc4 || op == 0xc5 || op == 0x62) && !px.rex) {
                len = decode_vex(p, n, at);
        } else if (op == 0x0f) {
                if ((size_t)at + 2 > n)
                        return;
                uint8_t op2 = p[at + 1];
                int m = 0;

                out->is_jcc = op2 >= 0x80 && op2 <= 0x8f;
                out->is_stop = op2 == 0x0b; /* ud2 */
                if (out->is_jcc && (size_t)at + 6 <= n)
                        out->rel = (int32_t)((uint32_t)p[at + 2] | (uint32_t)p[at + 3] << 8 |
                                             (uint32_t)p[at + 4] << 16 | (uint32_t)p[at + 5] << 24);
                if (op2 == 0x38 || op2 == 0x3a) {
                        m = modrm_len(p + at + 3, n - (size_t)at - 3);
                        len = m ? at + 3 + m + (op2 == 0x3a) : 0;
                } else {
                        if (op0f_has_modrm(op2) && !(m = modrm_len(p + at + 2, n - (size_t)at - 2)))
                                return;
                        len = at + 2 + m + op0f_imm(op2);
                }
        } else {
                int m = 0;
                uint8_t reg = 0;

                if (op1_has_modrm(op)) {
                        if (!(m = modrm_len(p + at + 1, n - (size_t)at - 1)))
                                return;
                        reg = (p[at + 1] >> 3) & 7;
                }
                len = at + 1 + m + op1_imm(op, osz, reg);
                if (op >= 0xa0 && op <= 0xa3) /* mov moffs */
                        len += (px.other && p[0] == 0x67) ? 4 : 8;
                out->is_ret = op == 0xc3 || op == 0xc2;
                out->is_jmp_rel = op == 0xe9 || op == 0xeb;
                out->is_call_rel = op == 0xe8;
                out->is_jcc = op >= 0x70 && op <= 0x7f;
                if (out->is_jcc && (size_t)at + 2 <= n)
                        out->rel = (int8_t)p[at + 1];
                /* int3, hlt, jmp through memory (a tail call through the GOT);
                 * jmp through a register is a jump table inside the body. */
                out->is_jmp_reg = op == 0xff && reg == 4 && (p[at + 1] >> 6) == 3;
                out->is_stop = op == 0xcc || op == 0xf4 ||
                               (op == 0xff && (reg == 4 || reg == 5) && !out->is_jmp_reg);
                if (out->is_jmp_rel || out->is_call_rel) {
                        if (op == 0xeb && (size_t)at + 2 <= n)
                                out->rel = (int8_t)p[at + 1];
                        else if ((size_t)at + 5 <= n)
                                out->rel = (int32_t)((uint32_t)p[at + 1] | (uint32_t)p[at + 2] << 8 |
                                                     (uint32_t)p[at + 3] << 16 | (uint32_t)p[at + 4] << 24);
                }
        }
        if (len <= 0 || (size_t)len > n || len > 15)
                return;
        out->len = len;
        classify(p, &px, at, out);
}
