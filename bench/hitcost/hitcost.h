/* hitcost.h: constants shared by bench/hitcost's BPF side and its driver. */
#pragma once

#define D9HC_REPS 8             /* each piece program repeats its piece this often */
