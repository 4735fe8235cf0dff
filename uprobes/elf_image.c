/* elf_image: open an executable read-only with libelf and answer the address
 * questions a probe plan needs (vaddr -> file offset, section contents,
 * build-id, debuglink). Uprobes attach by file offset, so every point in the
 * plan goes through d9_elf_vaddr_to_offset(). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "uprobes_int.h"

static int load_segments(struct elf_image *img)
{
        size_t n;

        if (elf_getphdrnum(img->elf, &n) < 0)
                return -EINVAL;
        img->segs = calloc(n ? n : 1, sizeof(*img->segs));
        if (!img->segs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                GElf_Phdr ph;

                if (!gelf_getphdr(img->elf, (int)i, &ph))
                        continue;
                /* Bounded: a crafted header must not move BPF's stack scan
                 * off every thread's stack (d9_stack_worker). */
                if (ph.p_type == PT_TLS && ph.p_memsz < (1u << 20) && ph.p_align <= 4096)
                        img->tls_size = ph.p_align > 1 ? (ph.p_memsz + ph.p_align - 1) / ph.p_align * ph.p_align
                                                       : ph.p_memsz;
                if (ph.p_type != PT_LOAD)
                        continue;
                img->segs[img->n_segs++] = (struct elf_segment){
                        .vaddr = ph.p_vaddr, .memsz = ph.p_memsz,
                        .offset = ph.p_offset, .filesz = ph.p_filesz,
                        .flags = ph.p_flags,
                };
        }
        return img->n_segs ? 0 : -ENOEXEC;
}

/* Takes fd over. The ELF is read from a sealed copy (d9_target_file_copy):
 * the owner of the file can truncate or rewrite it while we look, and a
 * mapping of the file itself would then fault (SIGBUS) inside libelf. */
int d9_elf_image_open_fd(int fd, const char *path, struct elf_image **out, char **err_msg)
{
        struct elf_image *img;
        GElf_Ehdr eh;
        int r;

        elf_version(EV_CURRENT);
        img = calloc(1, sizeof(*img));
        if (!img) {
                close(fd);
                return -ENOMEM;
        }
        img->fd = d9_target_file_copy(fd);
        close(fd);
        img->path = strdup(path);
        if (img->fd < 0) {
                r = img->fd;
                if (err_msg)
                        asprintf(err_msg, r == -EBADFD ? "%s is not a regular file" :
                                 r == -EFBIG ? "%s is larger than d9d reads (1 GiB)" :
                                 r == -ENODATA ? "%s changed while being read" : "cannot read %s: %s",
                                 path, strerror(-r));
                d9_elf_image_free(img);
                return r;
        }
        img->elf = elf_begin(img->fd, ELF_C_READ_MMAP, NULL);
        if (!img->elf || elf_kind(img->elf) != ELF_K_ELF || !gelf_getehdr(img->elf, &eh)) {
                if (err_msg)
                        asprintf(err_msg, "%s is not an ELF file", path);
                d9_elf_image_free(img);
                return -ENOEXEC;
        }
        img->e_type = eh.e_type;
        img->e_machine = eh.e_machine;
        if (eh.e_machine != EM_X86_64) {
                if (err_msg)
                        asprintf(err_msg, "%s is not an x86-64 executable (e_machine %u)",
                                 path, eh.e_machine);
                d9_elf_image_free(img);
                return -ENOEXEC;
        }
        r = load_segments(img);
        if (r < 0) {
                if (err_msg)
                        asprintf(err_msg, "%s has no loadable segments", path);
                d9_elf_image_free(img);
                return r;
        }
        img->has_sections = elf_getshdrstrndx(img->elf, &img->shstrndx) == 0;
        *out = img;
        return 0;
}

int d9_elf_image_open(const char *path, struct elf_image **out, char **err_msg)
{
        int fd = d9_target_file_open(path);

        if (fd < 0) {
                if (err_msg)
                        asprintf(err_msg, fd == -EBADFD ? "%s is not a regular file" : "cannot open %s: %s",
                                 path, strerror(-fd));
                return fd;
        }
        return d9_elf_image_open_fd(fd, path, out, err_msg);
}

void d9_elf_image_free(struct elf_image *img)
{
        if (!img)
                return;
        if (img->elf)
                elf_end(img->elf);
        if (img->fd >= 0)
                close(img->fd);
        free(img->segs);
        free(img->path);
        free(img);
}

static const struct elf_segment *segment_of(const struct elf_image *img, uint64_t vaddr)
{
        for (size_t i = 0; i < img->n_segs; i++) {
                const struct elf_segment *s = &img->segs[i];

                if (vaddr >= s->vaddr && vaddr < s->vaddr + s->memsz)
                        return s;
        }
        return NULL;
}

int d9_elf_vaddr_to_offset(const struct elf_image *img, uint64_t vaddr, uint64_t *offset)
{
        const struct elf_segment *s = segment_of(img, vaddr);

        if (!s || vaddr - s->vaddr >= s->filesz)
                return -ERANGE;
        *offset = vaddr - s->vaddr + s->offset;
        return 0;
}

bool d9_elf_vaddr_is_exec(const struct elf_image *img, uint64_t vaddr)
{
        const struct elf_segment *s = segment_of(img, vaddr);

        return s && (s->flags & PF_X);
}

const uint8_t *d9_elf_vaddr_bytes(const struct elf_image *img, uint64_t vaddr, size_t n)
{
        const struct elf_segment *s = segment_of(img, vaddr);
        size_t file_size;
        char *base;

        if (!s || vaddr - s->vaddr + n > s->filesz)
                return NULL;
        base = elf_rawfile(img->elf, &file_size);
        if (!base || s->offset + (vaddr - s->vaddr) + n > file_size)
                return NULL;
        return (const uint8_t *)base + s->offset + (vaddr - s->vaddr);
}

Elf_Scn *d9_elf_section_by_name(const struct elf_image *img, const char *name, GElf_Shdr *shdr)
{
        Elf_Scn *scn = NULL;

        if (!img->has_sections)
                return NULL;
        while ((scn = elf_nextscn(img->elf, scn))) {
                const char *n;

                if (!gelf_getshdr(scn, shdr))
                        continue;
                n = elf_strptr(img->elf, img->shstrndx, shdr->sh_name);
                if (n && strcmp(n, name) == 0)
                        return scn;
        }
        return NULL;
}

const uint8_t *d9_elf_section_data(const struct elf_image *img, const char *name,
                                size_t *size, uint64_t *addr)
{
        GElf_Shdr sh;
        Elf_Scn *scn = d9_elf_section_by_name(img, name, &sh);
        Elf_Data *d;

        if (!scn || sh.sh_type == SHT_NOBITS)
                return NULL;
        d = elf_rawdata(scn, NULL);
        if (!d || !d->d_buf)
                return NULL;
        *size = d->d_size;
        if (addr)
                *addr = sh.sh_addr;
        return d->d_buf;
}

/* Walks the notes of one section or segment for NT_GNU_BUILD_ID. */
static char *build_id_in(Elf_Data *d)
{
        GElf_Nhdr nh;
        size_t off = 0, name_off, desc_off;

        while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
                if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 ||
                    memcmp((char *)d->d_buf + name_off, "GNU", 4) != 0)
                        continue;
                char *hex = malloc(nh.n_descsz * 2 + 1);
                const uint8_t *b = (const uint8_t *)d->d_buf + desc_off;

                if (!hex)
                        return NULL;
                for (size_t i = 0; i < nh.n_descsz; i++)
                        sprintf(hex + 2 * i, "%02x", b[i]);
                return hex;
        }
        return NULL;
}

char *d9_elf_build_id(const struct elf_image *img)
{
        Elf_Scn *scn = NULL;
        GElf_Shdr sh;

        while (img->has_sections && (scn = elf_nextscn(img->elf, scn))) {
                Elf_Data *d;
                char *id;

                if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
                        continue;
                d = elf_getdata(scn, NULL);
                if (d && (id = build_id_in(d)))
                        return id;
        }
        /* Section headers can be stripped away entirely; try PT_NOTE. */
        size_t n;
        if (elf_getphdrnum(img->elf, &n) < 0)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                GElf_Phdr ph;
                Elf_Data *d;
                char *id;

                if (!gelf_getphdr(img->elf, (int)i, &ph) || ph.p_type != PT_NOTE)
                        continue;
                d = elf_getdata_rawchunk(img->elf, (int64_t)ph.p_offset, ph.p_filesz, ELF_T_NHDR);
                if (d && (id = build_id_in(d)))
                        return id;
        }
        return NULL;
}

char *d9_elf_debuglink(const struct elf_image *img)
{
        size_t size;
        const uint8_t *d = d9_elf_section_data(img, ".gnu_debuglink", &size, NULL);

        if (!d || size < 2 || !memchr(d, 0, size))
                return NULL;
        return strdup((const char *)d);
}
