package exec

// lowbit patch: this file is new. A Budget bounds one execution of a template so that a
// hostile template ends in a *LimitError instead of exhausting memory, the stack or time:
// Go cannot stop a goroutine, and a stack overflow or an out-of-memory is fatal, so the
// bounds are checked inside evaluation, before anything is built.

import (
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Limits bounds one execution of a template (Template.ExecuteLimited). A zero field sets no
// bound.
type Limits struct {
	// Output bounds the bytes written to the output or to any captured block (a macro's
	// output, {% set %}...{% endset %}, {% filter %}), and the size of any one value built.
	Output int
	// Memory bounds the bytes of all values built and text written, garbage included.
	Memory int
	// Iterations bounds the loop iterations, counted as a loop takes its items.
	Iterations int
	// Depth bounds the nesting of expressions, blocks and calls, and of values.
	Depth int
	// Time bounds the wall-clock time of the execution.
	Time time.Duration
}

// LimitError is the error of an execution that went past one of its Limits.
type LimitError struct{ Msg string }

func (e *LimitError) Error() string { return e.Msg }

// Budget is what remains of the Limits of one execution. A nil Budget bounds nothing. After
// its first error every check fails with that error, so that the execution unwinds at once
// even through code that drops errors.
type Budget struct {
	limits     Limits
	deadline   time.Time
	memory     int
	iterations int
	depth      int
	steps      int
	err        *LimitError
}

// NewBudget starts the clock of an execution bounded by l.
func NewBudget(l Limits) *Budget {
	b := &Budget{limits: l}
	if l.Time > 0 {
		b.deadline = time.Now().Add(l.Time)
	}
	return b
}

// Err returns the limit the execution went past, or nil.
func (b *Budget) Err() error {
	if b == nil || b.err == nil {
		return nil
	}
	return b.err
}

func (b *Budget) fail(format string, args ...any) error {
	b.err = &LimitError{Msg: fmt.Sprintf(format, args...)}
	return b.err
}

// Step counts one step of evaluation and checks the clock every 64 steps (time.Now is
// cheap, but not free).
func (b *Budget) Step() error {
	if b == nil {
		return nil
	}
	if b.err != nil {
		return b.err
	}
	b.steps++
	if b.steps%64 == 0 && !b.deadline.IsZero() && time.Now().After(b.deadline) {
		return b.fail("rendering took longer than %s", b.limits.Time)
	}
	return nil
}

// Enter counts one more level of nesting; the caller undoes it with Leave if Enter succeeded.
func (b *Budget) Enter() error {
	if b == nil {
		return nil
	}
	if b.err != nil {
		return b.err
	}
	if b.limits.Depth > 0 && b.depth >= b.limits.Depth {
		return b.fail("nesting deeper than %d", b.limits.Depth)
	}
	if err := b.Step(); err != nil {
		return err
	}
	b.depth++
	return nil
}

// Leave undoes one Enter.
func (b *Budget) Leave() {
	if b != nil {
		b.depth--
	}
}

// Iterate counts n loop iterations or range items, before they are made.
func (b *Budget) Iterate(n int) error {
	if b == nil {
		return nil
	}
	if b.err != nil {
		return b.err
	}
	if b.limits.Iterations > 0 && (n > b.limits.Iterations || b.iterations+n > b.limits.Iterations) {
		return b.fail("loop iterations exceed %s", thousands(b.limits.Iterations))
	}
	b.iterations += n
	return b.Step()
}

// Build counts a value of n bytes about to be built (n < 0 stands for a size past int).
func (b *Budget) Build(n int) error {
	if b == nil {
		return nil
	}
	if b.err != nil {
		return b.err
	}
	if b.limits.Output > 0 && (n < 0 || n > b.limits.Output) {
		if n < 0 {
			return b.fail("a value exceeds %s output limit", byteSize(b.limits.Output))
		}
		return b.fail("a value of %s bytes exceeds %s output limit", thousands(n), byteSize(b.limits.Output))
	}
	return b.charge(n)
}

func (b *Budget) charge(n int) error {
	if b.limits.Memory > 0 && (n < 0 || n > b.limits.Memory-b.memory) {
		return b.fail("values built exceed %s limit", byteSize(b.limits.Memory))
	}
	b.memory += n
	return b.Step()
}

// Write counts n bytes (n < 0 stands for a size past int) about to be written to w, which may
// hold no more than the Output limit (w's length is known when it has a Len method, as a
// strings.Builder or a bytes.Buffer has).
func (b *Budget) Write(w io.Writer, n int) error {
	if b == nil {
		return nil
	}
	if b.err != nil {
		return b.err
	}
	if l, ok := w.(interface{ Len() int }); ok && b.limits.Output > 0 && (n < 0 || n > b.limits.Output-l.Len()) {
		return b.fail("output exceeds %s limit", byteSize(b.limits.Output))
	}
	return b.charge(n)
}

// Value checks a value just built (by a filter, a method, a call, a literal): no larger than
// the Output limit once written out, nested no deeper than the Depth limit, and charged to
// the Memory limit. Every value a template can reach passes this check once made, so that any
// later walk over it (printing, comparing, converting) is bounded too.
func (b *Budget) Value(v *Value) error {
	if b == nil {
		return nil
	}
	n, err := b.Measure(v)
	if err != nil {
		return err
	}
	return b.charge(n)
}

// Collect checks a list or a dict just built of values already made (a literal, a sum of
// lists) as Value does, but charges only its own slots: the values it holds were charged when
// they were made, and charging them again each time a list grows by one would take the
// square of its length.
func (b *Budget) Collect(v *Value) error {
	if b == nil {
		return nil
	}
	if _, err := b.Measure(v); err != nil {
		return err
	}
	return b.charge(MulSizes(max(v.Len(), 1), 8))
}

// maxErrorText bounds the text of an error, to which every level of evaluation adds a clause
// quoting its expression.
const maxErrorText = 4096

// ShortError returns v or, if v is an error of a long text, a plain error of that text
// shortened (in the middle): the text of a chain of errors many levels deep took the square
// of the depth to make, and each level may quote a large expression or value.
func (b *Budget) ShortError(v *Value) *Value {
	if b == nil || !v.IsError() {
		return v
	}
	msg := v.Error()
	if len(msg) <= maxErrorText {
		return v
	}
	head, tail := msg[:maxErrorText/2], msg[len(msg)-maxErrorText/2:]
	return AsValue(errors.New(strings.ToValidUTF8(head, "") + " ... " + strings.ToValidUTF8(tail, "")))
}

// Measure returns the size of v written out, roughly: a string its length, any other
// scalar and any item or key at least 8 bytes. It fails once v is larger than the Output
// limit or deeper than the Depth limit, so it costs no more than that.
func (b *Budget) Measure(v *Value) (int, error) {
	if b == nil || v == nil {
		return 0, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	total := 0
	if err := b.measure(v.Interface(), 0, &total, 0); err != nil {
		return 0, err
	}
	return total, nil
}

// measure adds the size of x to total; self, when not 0, is a map x must not hold.
func (b *Budget) measure(x any, depth int, total *int, self uintptr) error {
	if b.limits.Depth > 0 && depth > b.limits.Depth {
		return b.fail("nesting deeper than %d", b.limits.Depth)
	}
	if v := reflect.ValueOf(x); self != 0 && depth > 0 && v.Kind() == reflect.Map && v.Pointer() == self {
		return b.fail("a value cannot contain itself")
	}
	size := 8
	err := eachItem(x, func(item any) error {
		size = 0
		return b.measure(item, depth+1, total, self)
	})
	if err != nil {
		return err
	}
	switch x := x.(type) {
	case string:
		size = max(size, len(x))
	case []byte:
		size = max(size, len(x))
	case *big.Int:
		size = max(size, x.BitLen()/3+1)
	}
	*total += size
	if b.limits.Output > 0 && *total > b.limits.Output {
		return b.fail("a value exceeds %s output limit", byteSize(b.limits.Output))
	}
	return nil
}

// eachItem calls f with every key and item of x if x is a list or a dict (the common kinds
// first, without reflection, which allocates), and nothing else: a string or a number has
// none, and an object (a loop, a cycler) holds none of the template's values.
func eachItem(x any, f func(any) error) error {
	switch x := x.(type) {
	case nil, string, []byte, bool, int, float64, *big.Int:
		return nil
	case *Value:
		if x == nil {
			return nil
		}
		return f(x.Interface())
	case []any:
		for _, item := range x {
			if err := f(item); err != nil {
				return err
			}
		}
		return nil
	case ValuesList:
		for _, item := range x {
			if err := f(item); err != nil {
				return err
			}
		}
		return nil
	case []int: // a range
		for range x {
			if err := f(nil); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		for k, item := range x {
			if err := f(k); err != nil {
				return err
			}
			if err := f(item); err != nil {
				return err
			}
		}
		return nil
	case *Dict:
		if x == nil {
			return nil
		}
		return eachItem(*x, f)
	case Dict:
		for _, p := range x.Pairs {
			if err := f(p.Key); err != nil {
				return err
			}
			if err := f(p.Value); err != nil {
				return err
			}
		}
		return nil
	}
	v := reflect.ValueOf(x)
	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil
		}
		for i := 0; i < v.Len(); i++ {
			if err := f(v.Index(i).Interface()); err != nil {
				return err
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if err := f(it.Key().Interface()); err != nil {
				return err
			}
			if err := f(it.Value().Interface()); err != nil {
				return err
			}
		}
	case reflect.Pointer:
		if !v.IsNil() && v.Elem().Kind() != reflect.Struct && v.Elem().CanInterface() {
			return f(v.Elem().Interface())
		}
	}
	return nil
}

// Assigned checks target, a list or a dict, after a value was stored in it ({% set ns.x =
// value %}): within the limits, as any value, and not holding itself, which would make every
// later walk over it endless.
func (b *Budget) Assigned(target *Value) error {
	if b == nil {
		return nil
	}
	if b.err != nil {
		return b.err
	}
	total := 0
	var self uintptr
	if t := target.getResolvedValue(); t.Kind() == reflect.Map {
		self = t.Pointer()
	}
	return b.measure(target.Interface(), 0, &total, self)
}

// PrintfSize bounds the length of fmt.Sprintf(format, args...): the format, and for every
// verb its width, its precision and the largest argument (fmt refuses widths and precisions
// past a million, and takes '*' from an argument).
func PrintfSize(format string, args []*Value, b *Budget) (int, error) {
	largest, err := largestSize(args, b)
	if err != nil {
		return 0, err
	}
	const most = 1e6
	total := len(format)
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		for i < len(format) && strings.IndexByte("+-# 0", format[i]) >= 0 {
			i++
		}
		for part := 0; part < 2; part++ { // the width, then the precision after a '.'
			if i < len(format) && format[i] == '*' {
				total = AddSizes(total, most)
				i++
			}
			n, next := leadingNumber(format, i)
			if n < 0 {
				n = most
			}
			total, i = AddSizes(total, min(n, most)), next
			if i >= len(format) || format[i] != '.' {
				break
			}
			i++
		}
		total = AddSizes(total, largest)
	}
	return total, nil
}

// PyFormatSize bounds the length of Python's format.format(args...): the format, and for
// every replacement field twice the largest argument (signs, prefixes and digit grouping)
// and every number of its spec (a width or a precision).
func PyFormatSize(format string, args []*Value, b *Budget) (int, error) {
	largest, err := largestSize(args, b)
	if err != nil {
		return 0, err
	}
	total := len(format)
	for i := 0; i < len(format); i++ {
		if format[i] != '{' {
			continue
		}
		total = AddSizes(total, MulSizes(largest, 2))
		for i++; i < len(format) && format[i] != '}'; {
			n, next := leadingNumber(format, i)
			if next == i {
				i++
				continue
			}
			total, i = AddSizes(total, n), next
		}
	}
	return total, nil
}

// largestSize returns the size of the largest of args.
func largestSize(args []*Value, b *Budget) (int, error) {
	largest := 0
	for _, a := range args {
		n, err := b.Measure(a)
		if err != nil {
			return 0, err
		}
		largest = max(largest, n)
	}
	return largest, nil
}

// leadingNumber reads the decimal number at s[i:], returning it (-1 past int) and the index
// after it.
func leadingNumber(s string, i int) (int, int) {
	n := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = AddSizes(MulSizes(n, 10), int(s[i]-'0'))
	}
	return n, i
}

// ReplaceSize returns the length of strings.Replace(s, old, new, n) (n < 0: every old).
func ReplaceSize(s, old, new string, n int) int {
	if len(new) <= len(old) {
		return len(s)
	}
	found := strings.Count(s, old)
	if n >= 0 && n < found {
		found = n
	}
	return AddSizes(len(s), MulSizes(found, len(new)-len(old)))
}

// IndentedJSONSize returns the length of the JSON compact once indented by indent spaces a
// level, the way json.Indent lays it out.
func IndentedJSONSize(compact []byte, indent int) int {
	size, depth, inString, escaped := len(compact), 0, false, false
	newline := func(depth int) { size = AddSizes(size, AddSizes(1, MulSizes(depth, indent))) }
	for i, c := range compact {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if i+1 < len(compact) && (compact[i+1] == '}' || compact[i+1] == ']') {
				continue
			}
			newline(depth)
		case c == '}' || c == ']':
			depth--
			if i > 0 && (compact[i-1] == '{' || compact[i-1] == '[') {
				continue
			}
			newline(depth)
		case c == ',':
			newline(depth)
		case c == ':':
			size = AddSizes(size, 1)
		}
	}
	return size
}

// AddSizes returns a+b, sizes, or -1 (past int) rather than overflow.
func AddSizes(a, b int) int {
	if a < 0 || b < 0 || a > int(^uint(0)>>1)-b {
		return -1
	}
	return a + b
}

// MulSizes returns a*b, sizes, or -1 (past int) rather than overflow.
func MulSizes(a, b int) int {
	if a < 0 || b < 0 || a != 0 && b > int(^uint(0)>>1)/a {
		return -1
	}
	return a * b
}

// byteSize writes n bytes the way a limit is written: 1 MiB, 130.4 MiB, 64 KiB, 100 bytes.
func byteSize(n int) string {
	unit := func(size float64, name string) string {
		return strings.TrimSuffix(strconv.FormatFloat(size, 'f', 1, 64), ".0") + " " + name
	}
	switch {
	case n >= 1<<20:
		return unit(float64(n)/(1<<20), "MiB")
	case n >= 1<<10:
		return unit(float64(n)/(1<<10), "KiB")
	}
	return thousands(n) + " bytes"
}

// thousands writes n with commas: 1,000,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}
