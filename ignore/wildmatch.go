package ignore

import "strings"

// Results of dowild, as in git's wildmatch.c.
const (
	wmMatch = iota
	wmNoMatch
	wmAbortAll        // no later position of an enclosing '*' can match
	wmAbortToStarstar // only an enclosing "**" may still match
)

// wildmatch reports whether text matches the glob pat, by git's
// wildmatch(3) (wildmatch.c, a line-by-line port): '*' matches any run of
// bytes, '?' any one byte, '[...]' a class ('!' or '^' negates, ']' first
// is literal, ranges, backslash escapes and the POSIX classes [:alpha:]
// etc., ASCII only), a backslash makes the next byte literal. With
// pathname (WM_PATHNAME), '*', '?' and classes never match '/', and "**"
// between slashes (or at either end) matches across directories. Matching
// is on bytes, case-sensitive. A malformed glob matches nothing where it
// is reached.
func wildmatch(pat, text string, pathname bool) bool {
	return dowild(pat, 0, text, 0, pathname) == wmMatch
}

// at returns s[i], or 0 (C's terminating NUL) past the end. Neither
// patterns (cut at NUL when read) nor file names hold a NUL byte.
func at(s string, i int) byte {
	if i < len(s) {
		return s[i]
	}
	return 0
}

func isGlobSpecial(c byte) bool {
	return c == '*' || c == '?' || c == '[' || c == '\\'
}

// dowild matches pat[p:] against text[t:]; start (C's "pattern") is p as
// the call began, the point before which a "**" counts as at the start.
func dowild(pat string, p int, text string, t int, pathname bool) int {
	start := p
	for ; p < len(pat); p, t = p+1, t+1 {
		pch := pat[p]
		tch := at(text, t)
		if tch == 0 && pch != '*' {
			return wmAbortAll
		}
		switch pch {
		case '\\':
			// Literal match with the next byte; a trailing backslash
			// (pch 0) matches nothing.
			p++
			if tch != at(pat, p) {
				return wmNoMatch
			}
		default:
			if tch != pch {
				return wmNoMatch
			}
		case '?':
			if pathname && tch == '/' {
				return wmNoMatch
			}
		case '*':
			var matchSlash bool
			p++
			if at(pat, p) == '*' {
				prevP := p - 2
				for p++; at(pat, p) == '*'; p++ {
				}
				switch {
				case !pathname:
					matchSlash = true
				case (prevP < start || pat[prevP] == '/') &&
					(at(pat, p) == 0 || at(pat, p) == '/' || (at(pat, p) == '\\' && at(pat, p+1) == '/')):
					// "**/" may match no directory at all.
					if at(pat, p) == '/' && dowild(pat, p+1, text, t, pathname) == wmMatch {
						return wmMatch
					}
					matchSlash = true
				default:
					matchSlash = false
				}
			} else {
				matchSlash = !pathname
			}
			if p >= len(pat) {
				// A trailing "**" matches everything; a trailing '*'
				// only if no slash is left.
				if !matchSlash && strings.IndexByte(text[t:], '/') >= 0 {
					return wmNoMatch
				}
				return wmMatch
			}
			if !matchSlash && pat[p] == '/' {
				// One '*' then a slash: skip to the next directory.
				i := strings.IndexByte(text[t:], '/')
				if i < 0 {
					return wmNoMatch
				}
				t += i // the loop consumes both slashes
				continue
			}
			for tch != 0 {
				if !isGlobSpecial(pat[p]) {
					// A literal follows: skip to its next occurrence.
					lit := pat[p]
					for {
						tch = at(text, t)
						if tch == 0 || (!matchSlash && tch == '/') || tch == lit {
							break
						}
						t++
					}
					if tch != lit {
						return wmNoMatch
					}
				}
				if m := dowild(pat, p, text, t, pathname); m != wmNoMatch {
					if !matchSlash || m != wmAbortToStarstar {
						return m
					}
				} else if !matchSlash && tch == '/' {
					return wmAbortToStarstar
				}
				t++
				tch = at(text, t)
			}
			return wmAbortAll
		case '[':
			np, r := matchBracket(pat, p, tch, pathname)
			if r != wmMatch {
				return r
			}
			p = np
		}
	}
	if t < len(text) {
		return wmNoMatch
	}
	return wmMatch
}

// matchBracket matches tch against the class opening at pat[p] ('['). It
// returns the index of the closing ']' and wmMatch, or wmNoMatch, or
// wmAbortAll for a malformed class.
func matchBracket(pat string, p int, tch byte, pathname bool) (int, int) {
	p++
	pch := at(pat, p)
	if pch == '^' {
		pch = '!'
	}
	negated := pch == '!'
	if negated {
		p++
		pch = at(pat, p)
	}
	var prevCh byte
	matched := false
	for {
		if pch == 0 {
			return 0, wmAbortAll
		}
		switch {
		case pch == '\\':
			p++
			pch = at(pat, p)
			if pch == 0 {
				return 0, wmAbortAll
			}
			if tch == pch {
				matched = true
			}
		case pch == '-' && prevCh != 0 && at(pat, p+1) != 0 && at(pat, p+1) != ']':
			p++
			pch = at(pat, p)
			if pch == '\\' {
				p++
				pch = at(pat, p)
				if pch == 0 {
					return 0, wmAbortAll
				}
			}
			if tch <= pch && tch >= prevCh {
				matched = true
			}
			pch = 0 // no range may start at its end
		case pch == '[' && at(pat, p+1) == ':':
			p += 2
			s := p
			for pch = at(pat, p); pch != 0 && pch != ']'; pch = at(pat, p) {
				p++
			}
			if pch == 0 {
				return 0, wmAbortAll
			}
			i := p - s - 1
			if i < 0 || pat[p-1] != ':' {
				// No ":]": an ordinary '[' in the set.
				p = s - 2
				pch = '['
				if tch == pch {
					matched = true
				}
				break
			}
			in, known := posixClass(pat[s:s+i], tch)
			if !known {
				return 0, wmAbortAll
			}
			if in {
				matched = true
			}
			pch = 0
		default:
			if tch == pch {
				matched = true
			}
		}
		prevCh = pch
		p++
		pch = at(pat, p)
		if pch == ']' {
			break
		}
	}
	if matched == negated || (pathname && tch == '/') {
		return 0, wmNoMatch
	}
	return p, wmMatch
}

// posixClass reports whether c is in the named POSIX class, with git's
// ASCII-only ctype (so [:space:] is space, tab, LF and CR only).
func posixClass(name string, c byte) (in, known bool) {
	isUpper := c >= 'A' && c <= 'Z'
	isLower := c >= 'a' && c <= 'z'
	isDigit := c >= '0' && c <= '9'
	isAlpha := isUpper || isLower
	isPrint := c >= 0x20 && c <= 0x7e
	switch name {
	case "alnum":
		return isAlpha || isDigit, true
	case "alpha":
		return isAlpha, true
	case "blank":
		return c == ' ' || c == '\t', true
	case "cntrl":
		return c < 0x20 || c == 0x7f, true
	case "digit":
		return isDigit, true
	case "graph":
		return isPrint && c != ' ', true
	case "lower":
		return isLower, true
	case "print":
		return isPrint, true
	case "punct":
		return isPrint && c != ' ' && !isAlpha && !isDigit, true
	case "space":
		return c == ' ' || c == '\t' || c == '\n' || c == '\r', true
	case "upper":
		return isUpper, true
	case "xdigit":
		return isDigit || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'), true
	}
	return false, false
}
