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

func ExampleCapture_Bound() {
	// Tiny sizes: 8 bytes kept from the start, the last 4, and no spill file.
	c, err := output.NewCapture(output.CaptureOptions{PrefixBytes: 8, TailBytes: 4})
	if err != nil {
		panic(err)
	}
	c.Write([]byte("one\ntwo\nthree\nfour\n"))
	c.Close()
	r, err := c.Bound(output.Off())
	if err != nil {
		panic(err)
	}
	r.Where = "job j1"
	fmt.Printf("%q\n%s\n", r.Kept, r.Notice())
	// Output:
	// "one\ntwo\n"
	// [output not retained whole (truncation is off): kept the first 8 of 19 bytes (2 of 4 lines); dropped 11 bytes (2 lines); retained: job j1, bytes 0-7 and the last 4 bytes (15-18) of 19]
}
