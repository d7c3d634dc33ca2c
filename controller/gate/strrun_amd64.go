//go:build !purego

package gate

import "golang.org/x/sys/cpu"

// strSkipAVX2 is strSkip for len(b) >= 32 on a CPU with AVX2.
//
//go:noescape
func strSkipAVX2(b []byte) (n int, esc, high bool)

var hasAVX2 = cpu.X86.HasAVX2

// strSkip scans a string body: it skips plain bytes and two-byte escapes (\" \\ \/ \b
// \f \n \r \t) and returns the index of the first byte that is '"', a control byte, or a
// backslash not starting a two-byte escape (\u, a bad escape, a backslash ending b), or
// len(b). esc reports that it skipped an escape; high that some byte >= 0x80 was read
// (perhaps a few past n). Bytes >= 0x80 are not checked here.
func strSkip(b []byte) (n int, esc, high bool) {
	if hasAVX2 && len(b) >= 32 {
		return strSkipAVX2(b)
	}
	return strSkipGo(b)
}
