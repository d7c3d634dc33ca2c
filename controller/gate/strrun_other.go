//go:build !amd64 || purego

package gate

// strSkip scans a string body: it skips plain bytes and escapes (\" \\ \/ \b \f \n \r
// \t, and \u with four hex digits) and returns the index of the first byte that is '"',
// a control byte, or a backslash not starting a valid escape (a bad escape, or one cut
// by the end of b), or len(b). esc reports that it skipped an escape; high that some
// byte >= 0x80 was read (perhaps a few past n). Bytes >= 0x80 are not checked here.
func strSkip(b []byte) (n int, esc, high bool) { return strSkipGo(b) }
