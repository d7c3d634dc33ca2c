package settings

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
)

// ErrBadArgv reports a command line ParseArgv cannot split.
var ErrBadArgv = errdefs.ErrInvalidArgument.WithMessage("bad argv")

// ParseArgv splits a wrapper command given as one string (`kennel run --transport-argv`):
// a JSON array of strings when it starts with "[", else words as a POSIX shell splits
// them, with no expansion: blanks separate words; '...' keeps everything literally;
// "..." keeps everything but \" \\ \$ \` and a backslash-newline, which it unescapes; a
// backslash outside quotes keeps the next character. An unterminated quote, an empty
// result or a NUL byte is refused with ErrBadArgv.
func ParseArgv(s string) ([]string, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, fmt.Errorf("parse argv: %w: NUL byte", ErrBadArgv)
	}
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "[") {
		var argv []string
		if err := json.Unmarshal([]byte(t), &argv); err != nil {
			return nil, fmt.Errorf("parse argv: %w: %w", ErrBadArgv, err)
		}
		if len(argv) == 0 {
			return nil, fmt.Errorf("parse argv: %w: empty", ErrBadArgv)
		}
		return argv, nil
	}
	var (
		argv   []string
		word   strings.Builder
		inWord bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				argv = append(argv, word.String())
				word.Reset()
				inWord = false
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("parse argv: %w: unterminated '", ErrBadArgv)
			}
			word.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) && strings.IndexByte("\"\\$`\n", s[j+1]) >= 0 {
					if s[j+1] != '\n' {
						word.WriteByte(s[j+1])
					}
					j++
					continue
				}
				word.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("parse argv: %w: unterminated \"", ErrBadArgv)
			}
			i = j
			inWord = true
		case c == '\\':
			if i+1 >= len(s) {
				return nil, fmt.Errorf("parse argv: %w: trailing backslash", ErrBadArgv)
			}
			if s[i+1] != '\n' {
				word.WriteByte(s[i+1])
				inWord = true
			}
			i++
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		argv = append(argv, word.String())
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("parse argv: %w: empty", ErrBadArgv)
	}
	return argv, nil
}
