package protocol

import "testing"

// Codes lists every Code of protocol version 1, in the order above.
func Codes() []Code {
	return []Code{
		CodeTooLarge, CodeUnserved, CodeNoType, CodeDuplicate, CodeInvalid, CodeOutside,
		CodeReadOnly, CodeNotFound, CodeBinary, CodeNoMatch, CodeAmbiguous, CodeLoop,
		CodeExists, CodeCrossDevice, CodeChanged, CodeDenied, CodeNoSpace, CodeUnavailable, CodeInternal,
	}
}

func TestCodesAreTheValidCodes(t *testing.T) {
	seen := map[Code]bool{}
	for _, c := range Codes() {
		if !c.Valid() {
			t.Errorf("Codes() lists %q, which is not Valid", c)
		}
		if seen[c] {
			t.Errorf("Codes() lists %q twice", c)
		}
		seen[c] = true
	}
	if !seen[CodeNoSpace] || CodeNoSpace != "no_space" {
		t.Errorf("no_space is not a code of version 1")
	}
	for _, c := range []Code{"", "nospace", "NO_SPACE", "closed", "internal "} {
		if c.Valid() {
			t.Errorf("%q is Valid", c)
		}
	}
}
