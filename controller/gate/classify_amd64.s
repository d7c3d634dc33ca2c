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

// CLASS loads the 32 bytes at off(SI) into x and their nibble classes into c (Y1, Y2
// and Y4 are scratch).
#define CLASS(off, x, c) \
	VMOVDQU off(SI), x \
	VPSRLW  $4, x, Y1  \
	VPAND   Y12, Y1, Y1 \
	VPAND   Y12, x, Y2 \
	VPSHUFB Y2, Y10, c \
	VPSHUFB Y1, Y11, Y4 \
	VPAND   c, Y4, c

// EQ sets r to the mask of the bytes of x equal to the bytes of k.
#define EQ(k, x, r) \
	VPCMPEQB  k, x, Y4 \
	VPMOVMSKB Y4, r

// ANY sets r to the mask of the classes c holding a bit of k.
#define ANY(k, c, r) \
	VPAND     k, c, Y4 \
	VPCMPEQB  Y7, Y4, Y4 \
	VPMOVMSKB Y4, r \
	NOTL      r

// CTL sets r to the mask of the bytes of x below 0x20.
#define CTL(x, r) \
	VPMINUB   Y15, x, Y4 \
	VPCMPEQB  Y4, x, Y4 \
	VPMOVMSKB Y4, r

// STORE stores AX | BX<<32 as the 64-bit mask at off(DI): whole words, so that Go's
// loads of them are forwarded from the stores.
#define STORE(off) \
	SHLQ $32, BX \
	ORQ  BX, AX  \
	MOVQ AX, off(DI)

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
	CLASS(0, Y0, Y3)
	CLASS(32, Y5, Y6)
	EQ(Y13, Y0, AX)
	EQ(Y13, Y5, BX)
	STORE(0)
	EQ(Y14, Y0, AX)
	EQ(Y14, Y5, BX)
	STORE(8)
	ANY(Y9, Y3, AX)
	ANY(Y9, Y6, BX)
	STORE(16)
	ANY(Y8, Y3, AX)
	ANY(Y8, Y6, BX)
	STORE(24)
	CTL(Y0, AX)
	CTL(Y5, BX)
	STORE(32)
	VPMOVMSKB Y0, AX
	VPMOVMSKB Y5, BX
	STORE(40)
	ADDQ $64, SI
	ADDQ $48, DI
	DECQ CX
	JNZ  loop

done:
	VZEROUPPER
	RET
