package convert

import (
	"io"

	"github.com/schollz/progressbar/v3"
)

// progressBar is the little a stage needs of a bar; noBar stands in when
// progress is off.
type progressBar interface {
	Add(n int) error
	Describe(description string)
	Finish() error
}

type noBar struct{}

func (noBar) Add(int) error   { return nil }
func (noBar) Describe(string) {}
func (noBar) Finish() error   { return nil }

// newBar returns a byte-counting bar with rate and ETA on w, or a silent one
// when w is nil (not a terminal, or --quiet).
func newBar(w io.Writer, total int64, desc string) progressBar {
	if w == nil {
		return noBar{}
	}
	return &lineBar{w: w, ProgressBar: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100e6),
		progressbar.OptionSetPredictTime(true),
	)}
}

// newCountBar is newBar for a count of things (tokens, tensors), not bytes.
func newCountBar(w io.Writer, total int64, desc string) progressBar {
	if w == nil {
		return noBar{}
	}
	return &lineBar{w: w, ProgressBar: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100e6),
		progressbar.OptionSetPredictTime(true),
	)}
}

// lineBar ends its line when finished, and only then: a bar that reaches its
// total is still redrawn by the descriptions that follow.
type lineBar struct {
	*progressbar.ProgressBar
	w io.Writer
}

func (b *lineBar) Finish() error {
	err := b.ProgressBar.Finish()
	io.WriteString(b.w, "\n")
	return err
}
