package output_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kennel-dev/kennel/output"
)

func ExampleBound() {
	text := []byte("one\ntwo\nthree\nfour\n")
	r, err := output.Bound(text, output.On(output.Limits{Lines: 2, Keep: output.Tail}))
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q\n%s\n", r.Kept, r.Notice())
	// Output:
	// "three\nfour\n"
	// [output truncated: kept the last 11 of 19 bytes (2 of 4 lines); dropped 8 bytes (2 lines); full output not kept]
}

func ExampleCapture_ReadPage() {
	c, err := output.NewCapture(output.CaptureOptions{})
	if err != nil {
		panic(err)
	}
	c.Write([]byte(strings.Repeat("x", 100_000)))
	if _, err := c.ReadPage(0, 100_000); errors.Is(err, output.ErrPageTooLarge) {
		fmt.Println(err)
	}
	page, _ := c.ReadPage(65536, 65536)
	fmt.Println(len(page.Data), page.More, page.EOF)
	// Output:
	// read offset=0 limit=100000: read at most 65536 bytes: use offset=0 limit=65536
	// 34464 true false
}
