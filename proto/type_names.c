/* Human names of field type codes, as trace-format.md section 4 spells them. */
#include "d9proto.h"

const char *d9_type_name(uint8_t code)
{
        static const char *const names[] = {
                [D9_T_I64] = "I64",
                [D9_T_F64] = "F64",
                [D9_T_BOOL] = "Bool",
                [D9_T_STRING] = "String",
                [D9_T_BYTES] = "Bytes",
                [D9_T_POOLED_STACK] = "PooledStackFrames",
                [D9_T_POOLED_STRING] = "PooledString",
                [D9_T_STACK] = "StackFrames",
                [D9_T_VARINT] = "Varint",
                [D9_T_STRING_MAP] = "StringMap",
                [D9_T_U8] = "U8",
                [D9_T_U16] = "U16",
                [D9_T_U32] = "U32",
                [D9_T_DYN_LIST] = "DynamicList",
                [D9_T_DYN_MAP] = "DynamicMap",
        };
        uint8_t base = D9_T_BASE(code);

        return base < sizeof(names) / sizeof(names[0]) && names[base] ? names[base] : "unknown";
}
