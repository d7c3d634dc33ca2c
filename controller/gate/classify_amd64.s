//go:build !purego

#include "textflag.h"

// classLo<> and classHi<> classify a byte by its low and its high nibble (VPSHUFB
// tables, the same 16 bytes in both lanes); the class is classLo[c&15] & classHi[c>>4]:
//   0x01 [ ] { }    0x02 ,    0x04 :    0x08 space    0x10 \t \n \r
// Each class is a product of a set of low nibbles and a set of high nibbles, so the AND
// of the two lookups is exact.
DATA classLo<>+0x00(SB)/8, $0x0000000000000008
DATA classLo<>+0x08(SB)/8, $0x0000110201141000
DATA classLo<>+0x10(SB)/8, $0x0000000000000008
DATA classLo<>+0x18(SB)/8, $0x0000110201141000
GLOBL classLo<>(SB), RODATA|NOPTR, $32
DATA classHi<>+0x00(SB)/8, $0x01000100040A0010
DATA classHi<>+0x08(SB)/8, $0x0000000000000000
DATA classHi<>+0x10(SB)/8, $0x01000100040A0010
DATA classHi<>+0x18(SB)/8, $0x0000000000000000
GLOBL classHi<>(SB), RODATA|NOPTR, $32

DATA classNibble<>+0(SB)/1, $0x0f
GLOBL classNibble<>(SB), RODATA|NOPTR, $1
DATA classQuote<>+0(SB)/1, $0x22
GLOBL classQuote<>(SB), RODATA|NOPTR, $1
DATA classBackslash<>+0(SB)/1, $0x5c
GLOBL classBackslash<>(SB), RODATA|NOPTR, $1
DATA classCtl<>+0(SB)/1, $0x1f
GLOBL classCtl<>(SB), RODATA|NOPTR, $1
DATA classOp<>+0(SB)/1, $0x07
GLOBL classOp<>(SB), RODATA|NOPTR, $1
DATA classWS<>+0(SB)/1, $0x18
GLOBL classWS<>(SB), RODATA|NOPTR, $1

// HALF classifies the 32 bytes at off(SI) and stores the six 32-bit masks at off/2(DI)
// plus 0, 8, 16, 24, 32, 40: quote, backslash, op, ws, ctl, high (blockMasks' order).
#define HALF(off, moff) \
	VMOVDQU   off(SI), Y0       \
	VPSRLW    $4, Y0, Y1        \
	VPAND     Y12, Y1, Y1       \
	VPAND     Y12, Y0, Y2       \
	VPSHUFB   Y2, Y10, Y3       \
	VPSHUFB   Y1, Y11, Y4       \
	VPAND     Y3, Y4, Y3        \
	VPCMPEQB  Y13, Y0, Y4       \
	VPMOVMSKB Y4, AX            \
	MOVL      AX, (moff+0)(DI)  \
	VPCMPEQB  Y14, Y0, Y4       \
	VPMOVMSKB Y4, AX            \
	MOVL      AX, (moff+8)(DI)  \
	VPAND     Y9, Y3, Y4        \
	VPCMPEQB  Y7, Y4, Y4        \
	VPMOVMSKB Y4, AX            \
	NOTL      AX                \
	MOVL      AX, (moff+16)(DI) \
	VPAND     Y8, Y3, Y4        \
	VPCMPEQB  Y7, Y4, Y4        \
	VPMOVMSKB Y4, AX            \
	NOTL      AX                \
	MOVL      AX, (moff+24)(DI) \
	VPMINUB   Y15, Y0, Y4       \
	VPCMPEQB  Y4, Y0, Y4        \
	VPMOVMSKB Y4, AX            \
	MOVL      AX, (moff+32)(DI) \
	VPMOVMSKB Y0, AX            \
	MOVL      AX, (moff+40)(DI)

// func classifyAVX2(b []byte, out *blockMasks)
//
// classifies len(b)/64 blocks of 64 bytes into out[0:len(b)/64]; len(b) must be a
// multiple of 64.
TEXT ·classifyAVX2(SB), NOSPLIT, $0-32
	MOVQ         b_base+0(FP), SI
	MOVQ         b_len+8(FP), CX
	MOVQ         out+24(FP), DI
	VMOVDQU      classLo<>(SB), Y10
	VMOVDQU      classHi<>(SB), Y11
	VPBROADCASTB classNibble<>(SB), Y12
	VPBROADCASTB classQuote<>(SB), Y13
	VPBROADCASTB classBackslash<>(SB), Y14
	VPBROADCASTB classCtl<>(SB), Y15
	VPBROADCASTB classOp<>(SB), Y9
	VPBROADCASTB classWS<>(SB), Y8
	VPXOR        Y7, Y7, Y7
	SHRQ         $6, CX
	JZ           done

loop:
	HALF(0, 0)
	HALF(32, 4)
	ADDQ $64, SI
	ADDQ $48, DI
	DECQ CX
	JNZ  loop

done:
	VZEROUPPER
	RET
