package ignore

import (
	"bytes"
	"strings"
)

// pattern is one line of a .gitignore file, parsed and matched as git's
// dir.c does (parse_path_pattern, match_basename, match_pathname).
type pattern struct {
	// pat is the glob, without a leading '!' or a trailing '/'.
	pat string
	// prefix is the length of pat's literal start, before its first
	// '*', '?', '[' or '\\'; it is compared as bytes, and the rest matched
	// as a glob of its own (so in "a**/b" the "**" counts as leading, as
	// it does in git).
	prefix int
	// base: pat has no slash and matches a path's last component at any
	// depth; otherwise pat matches the path relative to the directory of
	// its .gitignore.
	base bool
	// endsWith: pat is '*' then a literal, matched as a suffix.
	endsWith bool
	// dirOnly: the line ended with '/'; only directories match.
	dirOnly bool
	// negate: the line began with '!'; a match re-includes.
	negate bool
}

// MaxFileSize is the largest .gitignore read, in bytes: a larger one (100
// MiB or more) counts as empty and is not read, as git's dir.c skips a
// pattern file of PATTERN_MAX_FILE_SIZE (100 MiB) or more with a warning.
// (Older git, such as 2.39, reads any size: there, the two differ.)
const MaxFileSize = 100<<20 - 1

// parseIgnoreFile parses the contents of a .gitignore file as git does: a
// UTF-8 BOM is skipped; lines end at '\n' and a '\r' before it is dropped;
// empty lines and lines starting with '#' are skipped; a line ends at a NUL
// byte; unescaped trailing spaces are trimmed. Patterns that can match
// nothing (empty ones) are dropped.
func parseIgnoreFile(data []byte) []pattern {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	var ps []pattern
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if i := bytes.IndexByte(line, 0); i >= 0 {
			line = line[:i]
		}
		if p, ok := parsePattern(string(trimTrailingSpaces(line))); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// trimTrailingSpaces drops trailing spaces that no backslash escapes; a
// line ending in a lone backslash is left as it is (git's rule).
func trimTrailingSpaces(line []byte) []byte {
	lastSpace := -1
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case ' ':
			if lastSpace < 0 {
				lastSpace = i
			}
		case '\\':
			i++
			if i == len(line) {
				return line
			}
			lastSpace = -1
		default:
			lastSpace = -1
		}
	}
	if lastSpace >= 0 {
		return line[:lastSpace]
	}
	return line
}

// parsePattern parses one trimmed, non-comment line. It reports false for
// a pattern that can match nothing (an empty one).
func parsePattern(line string) (pattern, bool) {
	var p pattern
	if strings.HasPrefix(line, "!") {
		p.negate = true
		line = line[1:]
	}
	p.prefix = simpleLength(line)
	p.endsWith = strings.HasPrefix(line, "*") && simpleLength(line[1:]) == len(line)-1
	if strings.HasSuffix(line, "/") {
		p.dirOnly = true
		line = line[:len(line)-1]
	}
	if line == "" {
		return p, false
	}
	p.prefix = min(p.prefix, len(line))
	p.base = !strings.Contains(line, "/")
	p.pat = line
	return p, true
}

// simpleLength is the length of s's start before any glob special byte.
func simpleLength(s string) int {
	for i := 0; i < len(s); i++ {
		if isGlobSpecial(s[i]) {
			return i
		}
	}
	return len(s)
}

// match reports whether p matches a path, ignoring negation: rel is the
// path relative to the directory of p's .gitignore, name its last
// component, isDir whether it is a directory (a symlink is not).
func (p *pattern) match(rel, name string, isDir bool) bool {
	if p.dirOnly && !isDir {
		return false
	}
	if p.base {
		switch {
		case p.prefix == len(p.pat):
			return name == p.pat
		case p.endsWith:
			return strings.HasSuffix(name, p.pat[1:])
		}
		return wildmatch(p.pat, name, false)
	}
	pat, prefix := p.pat, p.prefix
	if pat[0] == '/' {
		pat, prefix = pat[1:], prefix-1
	}
	if prefix > 0 {
		if prefix > len(rel) || rel[:prefix] != pat[:prefix] {
			return false
		}
		pat, rel = pat[prefix:], rel[prefix:]
		if pat == "" && rel == "" {
			return true
		}
	}
	return wildmatch(pat, rel, true)
}
