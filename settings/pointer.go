package settings

import (
	"strconv"
	"strings"
)

// pointerEscape escapes one reference token of a JSON pointer (RFC 6901).
var pointerEscape = strings.NewReplacer("~", "~0", "/", "~1")

// child returns the pointer of member key under ptr.
func child(ptr, key string) string { return ptr + "/" + pointerEscape.Replace(key) }

// index returns the pointer of element i under ptr.
func index(ptr string, i int) string { return ptr + "/" + strconv.Itoa(i) }

// dotted turns a key path ("kernelTransport.python") into its JSON pointer.
func dotted(path []string) string {
	ptr := ""
	for _, p := range path {
		ptr = child(ptr, p)
	}
	return ptr
}

// under reports whether pointer p is q or below it.
func under(p, q string) bool {
	return p == q || strings.HasPrefix(p, q+"/")
}
