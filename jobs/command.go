package jobs

import (
	"strings"
	"unicode/utf8"
)

// MaxCommand is the most Unicode scalars a job's command keeps (and an observation
// shows).
const MaxCommand = 4096

// TakeScalars returns the first n Unicode scalars of s, cut on a character boundary. It
// reads only the prefix it keeps (not the whole string) and copies only that. Invalid
// UTF-8 in the prefix counts one scalar a byte and comes back as U+FFFD, so the result
// is valid UTF-8 of at most n scalars. n <= 0 gives "".
func TakeScalars(s string, n int) string {
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return strings.ToValidUTF8(s[:i], "\uFFFD")
}
