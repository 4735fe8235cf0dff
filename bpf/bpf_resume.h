/* bpf_resume.h: how this kernel lets d9's BPF read a long off-CPU
 * interval's user stack in the thread itself as it resumes (enum
 * d9_resume_way, d9_events.h). Shared by the loader, which builds
 * d9_sched for it, and by d9d's preflight, which reports it. */
#pragma once

#include "d9_events.h"

/* Probed once per process (a tiny program is loaded and freed, and the
 * kernel's BTF read); later calls return the first answer. */
enum d9_resume_way d9_bpf_resume_way(void);

/* What the way is and why it was chosen, to follow "off-CPU user stacks: ". */
const char *d9_bpf_resume_why(void);
