//go:build !purego

#include "textflag.h"

DATA strrunQuote<>+0(SB)/1, $0x22
GLOBL strrunQuote<>(SB), RODATA|NOPTR, $1
DATA strrunBackslash<>+0(SB)/1, $0x5c
GLOBL strrunBackslash<>(SB), RODATA|NOPTR, $1
DATA strrunCtl<>+0(SB)/1, $0x1f
GLOBL strrunCtl<>(SB), RODATA|NOPTR, $1
DATA strrunNibble<>+0(SB)/1, $0x0f
GLOBL strrunNibble<>(SB), RODATA|NOPTR, $1

// strrunEscLo<> and strrunEscHi<> classify the bytes that may follow a backslash, and
// hex digits, by their low and high nibbles (VPSHUFB tables, the same 16 bytes in both
// lanes): a byte's class is strrunEscLo[c&15] & strrunEscHi[c>>4]. Each bit is a product
// of a set of low and a set of high nibbles, so the AND is exact:
//   0x01 "   0x02 /   0x04 \   0x08 b f n   0x10 r t   0x20 0-9   0x40 a-f A-F   0x80 u
DATA strrunEscLo<>+0x00(SB)/8, $0x2068E07060796020
DATA strrunEscLo<>+0x08(SB)/8, $0x0208000400002020
DATA strrunEscLo<>+0x10(SB)/8, $0x2068E07060796020
DATA strrunEscLo<>+0x18(SB)/8, $0x0208000400002020
GLOBL strrunEscLo<>(SB), RODATA|NOPTR, $32
DATA strrunEscHi<>+0x00(SB)/8, $0x9048044020030000
DATA strrunEscHi<>+0x08(SB)/8, $0x0000000000000000
DATA strrunEscHi<>+0x10(SB)/8, $0x9048044020030000
DATA strrunEscHi<>+0x18(SB)/8, $0x0000000000000000
GLOBL strrunEscHi<>(SB), RODATA|NOPTR, $32
DATA strrunSimple<>+0(SB)/1, $0x1f
GLOBL strrunSimple<>(SB), RODATA|NOPTR, $1
DATA strrunHex<>+0(SB)/1, $0x60
GLOBL strrunHex<>(SB), RODATA|NOPTR, $1
DATA strrunU<>+0(SB)/1, $0x80
GLOBL strrunU<>(SB), RODATA|NOPTR, $1

// EQMASK sets r to the 64-bit mask of the bytes of Y0 (low half) and Y5 (high half)
// equal to the bytes of k. tmp is clobbered. CTLMASK does so for the control bytes.
#define EQMASK(k, r, tmp) \
	VPCMPEQB  k, Y0, Y4 \
	VPMOVMSKB Y4, r     \
	VPCMPEQB  k, Y5, Y4 \
	VPMOVMSKB Y4, tmp   \
	SHLQ      $32, tmp  \
	ORQ       tmp, r

#define CTLMASK(r, tmp) \
	VPMINUB   Y3, Y0, Y4  \
	VPCMPEQB  Y4, Y0, Y4  \
	VPMOVMSKB Y4, r       \
	VPMINUB   Y3, Y5, Y4  \
	VPCMPEQB  Y4, Y5, Y4  \
	VPMOVMSKB Y4, tmp     \
	SHLQ      $32, tmp    \
	ORQ       tmp, r

// ESCCLASS sets c to the classes (strrunEscLo<>) of the bytes of x.
#define ESCCLASS(x, c) \
	VPSRLW    $4, x, Y4   \
	VPAND     Y13, Y4, Y4 \
	VPSHUFB   Y4, Y11, Y4 \
	VPAND     Y13, x, c   \
	VPSHUFB   c, Y10, c   \
	VPAND     Y4, c, c

// CLASSMASK sets r to the 64-bit mask of the bytes whose class (Y8, Y9) has a bit of k.
#define CLASSMASK(k, r, tmp) \
	VPAND     k, Y8, Y4   \
	VPCMPEQB  Y7, Y4, Y4  \
	VPMOVMSKB Y4, r       \
	NOTL      r           \
	VPAND     k, Y9, Y4   \
	VPCMPEQB  Y7, Y4, Y4  \
	VPMOVMSKB Y4, tmp     \
	NOTL      tmp         \
	SHLQ      $32, tmp    \
	ORQ       tmp, r

// func strSkipAVX2(b []byte) (n int, esc, high, stopped bool)
//
// Scans a string body 64 bytes a step: skips plain bytes and escapes (\" \\ \/ \b \f
// \n \r \t and \u with four hex digits) and stops (stopped true) at the first byte that
// is '"', a control byte, or a backslash not starting a valid escape; n is its index. A
// \u escape whose digits run into the next block counts as not valid here (the caller
// checks it). With fewer than 64 bytes left and no stop, it returns stopped false and n
// where the caller goes on scanning: the first byte not scanned, or a backslash before
// it whose escaped byte is. esc reports an escape skipped before n; high that a byte >=
// 0x80 was read (blocks are read whole, so perhaps past n).
//
// Escapes are found without a branch for each, as simdjson does: in a run of backslashes every
// second one escapes the next byte, and an addition whose carries run along each run
// gives its parity. R8 carries "the next byte is escaped" from one block to the next.
TEXT ·strSkipAVX2(SB), NOSPLIT, $0-35
	MOVQ         b_base+0(FP), DI
	MOVQ         b_len+8(FP), R9
	ADDQ         DI, R9                  // end
	MOVQ         DI, SI                  // cursor: the block being scanned
	XORL         R10, R10                // esc: nonzero once an escape is skipped
	XORL         R8, R8                  // 1: the byte at SI is escaped
	VPBROADCASTB strrunQuote<>(SB), Y1
	VPBROADCASTB strrunBackslash<>(SB), Y2
	VPBROADCASTB strrunCtl<>(SB), Y3
	VPBROADCASTB strrunNibble<>(SB), Y13
	VPBROADCASTB strrunSimple<>(SB), Y14
	VPBROADCASTB strrunHex<>(SB), Y15
	VMOVDQU      strrunEscLo<>(SB), Y10
	VMOVDQU      strrunEscHi<>(SB), Y11
	VPXOR        Y7, Y7, Y7
	VPXOR        Y12, Y12, Y12

loop:
	LEAQ     64(SI), AX
	CMPQ     AX, R9
	JA       tail
	VMOVDQU  (SI), Y0
	VMOVDQU  32(SI), Y5
	VPOR     Y0, Y12, Y12
	VPOR    Y5, Y12, Y12
	EQMASK(Y1, R11, AX)                  // R11: quotes
	EQMASK(Y2, R12, AX)                  // R12: backslashes
	CTLMASK(R13, AX)                     // R13: control bytes
	MOVQ    R12, AX
	ORQ     R8, AX
	JNZ     escapes
	ORQ     R13, R11                     // stops: quotes and control bytes
	JNZ     found
	ADDQ    $64, SI
	JMP     loop

escapes:
	// The escaped bytes, from the backslashes (R12) and the carry (R8).
	MOVQ  R8, AX
	NOTQ  AX
	ANDQ  AX, R12                        // a backslash escaped from before starts nothing
	MOVQ  R12, CX
	SHLQ  $1, CX
	ORQ   R8, CX                         // CX: bytes right after a backslash that escapes
	MOVQ  $0xAAAAAAAAAAAAAAAA, DX
	ANDQ  R12, DX
	MOVQ  CX, AX
	NOTQ  AX
	ANDQ  AX, DX                         // DX: backslash runs starting at odd bits
	XORL  R8, R8
	ADDQ  R12, DX                        // carries run along each run; out: next block
	SETCS R8
	SHLQ  $1, DX
	MOVQ  $0x5555555555555555, AX
	XORQ  AX, DX
	ANDQ  CX, DX                         // DX: the escaped bytes
	// Which escaped bytes make a valid escape: " \ / b f n r t, or u and four hex digits.
	ESCCLASS(Y0, Y8)
	ESCCLASS(Y5, Y9)
	CLASSMASK(Y14, R12, AX)              // R12: " \ / b f n r t
	VPMOVMSKB Y8, BX
	VPMOVMSKB Y9, AX
	SHLQ      $32, AX
	ORQ       AX, BX                     // BX: u
	ANDQ      DX, BX                     // BX: escaped u
	JZ        checked
	CLASSMASK(Y15, CX, AX)               // CX: hex digits
	SHRQ      $1, CX
	MOVQ      CX, AX
	SHRQ      $1, AX
	ANDQ      AX, CX
	MOVQ      CX, AX
	SHRQ      $2, AX
	ANDQ      AX, CX                     // CX: bytes followed by four hex digits
	ANDQ      CX, BX
	ORQ       BX, R12

checked: // R12: bytes that make a valid escape after a backslash
	MOVQ      R12, AX
	NOTQ      AX
	ANDQ      DX, AX                     // AX: escaped bytes that make no valid escape
	TESTQ     $1, AX
	JNZ       badfirst
	SHRQ      $1, AX                     // their backslashes
	MOVQ      DX, CX
	NOTQ      CX
	ANDQ      CX, R11                    // quotes not escaped
	ORQ       R13, R11
	ORQ       AX, R11                    // stops
	ANDQ      R12, DX                    // DX: the valid escapes' escaped bytes
	TESTQ     R11, R11
	JZ        next
	MOVQ      R11, AX
	NEGQ      AX
	ANDQ      R11, AX
	DECQ      AX                         // the bytes below the first stop
	ANDQ      AX, DX
	ORQ       DX, R10
	JMP       found

next:
	ORQ  DX, R10
	ADDQ $64, SI
	JMP  loop

badfirst:
	// The block's first byte is escaped but makes no valid escape: stop at its
	// backslash, the byte before.
	DECQ SI
	JMP  stop

found:
	BSFQ R11, AX
	ADDQ AX, SI

stop:
	MOVB $1, stopped+34(FP)
	JMP  out

tail:
	SUBQ R8, SI                          // back to a backslash whose escaped byte is next
	MOVB $0, stopped+34(FP)

out:
	SUBQ      DI, SI
	MOVQ      SI, n+24(FP)
	TESTQ     R10, R10
	SETNE     esc+32(FP)
	VPMOVMSKB Y12, AX
	TESTL     AX, AX
	SETNE     high+33(FP)
	VZEROUPPER
	RET
