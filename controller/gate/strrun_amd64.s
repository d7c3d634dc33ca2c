//go:build !purego

#include "textflag.h"

DATA strrunQuote<>+0(SB)/1, $0x22
GLOBL strrunQuote<>(SB), RODATA|NOPTR, $1
DATA strrunBackslash<>+0(SB)/1, $0x5c
GLOBL strrunBackslash<>(SB), RODATA|NOPTR, $1
DATA strrunCtl<>+0(SB)/1, $0x1f
GLOBL strrunCtl<>(SB), RODATA|NOPTR, $1

// strrunSimple<>[c] is 1 for the characters of a two-byte escape: " \ / b f n r t.
DATA strrunSimple<>+0x22(SB)/1, $1
DATA strrunSimple<>+0x2f(SB)/1, $1
DATA strrunSimple<>+0x5c(SB)/1, $1
DATA strrunSimple<>+0x62(SB)/1, $1
DATA strrunSimple<>+0x66(SB)/1, $1
DATA strrunSimple<>+0x6e(SB)/1, $1
DATA strrunSimple<>+0x72(SB)/1, $1
DATA strrunSimple<>+0x74(SB)/1, $1
GLOBL strrunSimple<>(SB), RODATA|NOPTR, $256

// FLAGS computes into AX the mask of bytes of Y0 that are '"', '\\' or below 0x20, and
// ORs Y0 into Y12 (whose high bits then say a byte >= 0x80 was read).
#define FLAGS \
	VPOR      Y0, Y12, Y12 \
	VPCMPEQB  Y0, Y1, Y4   \
	VPCMPEQB  Y0, Y2, Y5   \
	VPMINUB   Y0, Y3, Y6   \
	VPCMPEQB  Y0, Y6, Y6   \
	VPOR      Y4, Y5, Y4   \
	VPOR      Y4, Y6, Y4   \
	VPMOVMSKB Y4, AX

// func strSkipAVX2(b []byte) (n int, esc, high bool)
//
// Scans a string body: skips plain bytes and two-byte escapes (\" \\ \/ \b \f \n \r \t)
// and returns the index of the first byte that is '"', a control byte, or a backslash
// not starting a two-byte escape (\u, a bad escape, or a backslash ending b); or len(b).
// esc reports a two-byte escape skipped; high that a byte >= 0x80 was read (blocks are
// read whole, so perhaps past n). len(b) must be at least 32: a block that would run
// past the end is loaded ending at the end instead, with the bytes already scanned
// masked off.
TEXT ·strSkipAVX2(SB), NOSPLIT, $0-34
	MOVQ b_base+0(FP), DI           // base
	MOVQ b_len+8(FP), R8
	LEAQ (DI)(R8*1), R9             // end
	LEAQ -32(R9), DX                // start of the last whole block
	MOVQ DI, SI                     // cursor
	XORL R10, R10                   // esc
	VPBROADCASTB strrunQuote<>(SB), Y1
	VPBROADCASTB strrunBackslash<>(SB), Y2
	VPBROADCASTB strrunCtl<>(SB), Y3
	VPXOR        Y12, Y12, Y12
	LEAQ         strrunSimple<>(SB), R11

loop:
	CMPQ SI, DX
	JA   last
	VMOVDQU (SI), Y0
	FLAGS
	TESTL AX, AX
	JNZ   found
	ADDQ  $32, SI
	JMP   loop

last:
	CMPQ SI, R9
	JAE  none
	VMOVDQU (DX), Y0
	FLAGS
	MOVQ  SI, CX
	SUBQ  DX, CX                    // bytes of this block already scanned: 1 to 31
	SHRL  CX, AX
	SHLL  CX, AX
	TESTL AX, AX
	JZ    none
	MOVQ  DX, SI

found:
	BSFL    AX, AX
	ADDQ    AX, SI                  // SI: the flagged byte
	MOVBLZX (SI), AX
	CMPB    AL, $0x5c
	JNE     stop
	LEAQ    1(SI), CX
	CMPQ    CX, R9
	JAE     stop                    // a backslash ending b
	MOVBLZX (CX), AX
	MOVBLZX (R11)(AX*1), AX
	TESTL   AX, AX
	JZ      stop                    // \u or a bad escape: the caller decides
	MOVL    $1, R10
	ADDQ    $2, SI
	JMP     loop

none:
	MOVQ R9, SI

stop:
	SUBQ      DI, SI
	MOVQ      SI, n+24(FP)
	MOVB      R10, esc+32(FP)
	VPMOVMSKB Y12, AX
	TESTL     AX, AX
	SETNE     high+33(FP)
	VZEROUPPER
	RET
