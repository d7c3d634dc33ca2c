//go:build !purego

package gate

import "golang.org/x/sys/cpu"

// strSkipAVX2 is strSkip 64 bytes a step on a CPU with AVX2; it leaves the last bytes
// (fewer than 64) to the caller: see strrun_amd64.s.
//
//go:noescape
func strSkipAVX2(b []byte) (n int, esc, high, stopped bool)

var hasAVX2 = cpu.X86.HasAVX2

// strSkip scans a string body: it skips plain bytes and escapes (\" \\ \/ \b \f \n \r
// \t, and \u with four hex digits) and returns the index of the first byte that is '"',
// a control byte, or a backslash not starting a valid escape (a bad escape, or one cut
// by the end of b), or len(b). esc reports that it skipped an escape; high that some
// byte >= 0x80 was read (perhaps a few past n). Bytes >= 0x80 are not checked here.
func strSkip(b []byte) (n int, esc, high bool) {
	for hasAVX2 && len(b)-n >= 64 {
		m, e, h, stopped := strSkipAVX2(b[n:])
		n, esc, high = n+m, esc || e, high || h
		if !stopped {
			break
		}
		// A \u escape whose digits ran into the next block is left to us.
		if b[n] != '\\' || len(b)-n < 6 || b[n+1] != 'u' || hex4(b[n+2:n+6]) < 0 {
			return n, esc, high
		}
		n, esc = n+6, true
	}
	m, e, h := strSkipGo(b[n:])
	return n + m, esc || e, high || h
}
