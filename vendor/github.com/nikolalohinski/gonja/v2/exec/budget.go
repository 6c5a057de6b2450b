package exec

// lowbit patch: this file is new. A Budget bounds one execution of a template so that a
// hostile template ends in a *LimitError instead of exhausting memory, the stack or time:
// Go cannot stop a goroutine, and a stack overflow or an out-of-memory is fatal, so the
// bounds are checked inside evaluation, before anything is built.

import (
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
	// Iterations bounds the loop iterations and range items.
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
	if err := b.measure(v.Val, 0, &total); err != nil {
		return 0, err
	}
	return total, nil
}

var typeOfBigInt = reflect.TypeFor[*big.Int]()

func (b *Budget) measure(v reflect.Value, depth int, total *int) error {
	if b.limits.Depth > 0 && depth > b.limits.Depth {
		return b.fail("nesting deeper than %d", b.limits.Depth)
	}
	if b.limits.Output > 0 && *total > b.limits.Output {
		return b.fail("a value exceeds %s output limit", byteSize(b.limits.Output))
	}
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) && !v.IsNil() {
		switch {
		case v.Type() == typeOfValuePtr:
			v = v.Interface().(*Value).Val
		case v.Type() == typeOfBigInt:
			*total += max(8, v.Interface().(*big.Int).BitLen()/3+1)
			return nil
		case v.Kind() == reflect.Pointer && v.Elem().Kind() != reflect.Struct:
			v = v.Elem()
		case v.Kind() == reflect.Pointer && v.Elem().Type() != TypeDict:
			*total += 8 // an object (loop, cycler, ...): its fields are not the template's values
			return nil
		default:
			v = v.Elem()
		}
	}
	size := 8
	switch {
	case !v.IsValid():
	case v.Kind() == reflect.String:
		size = max(size, v.Len())
	case (v.Kind() == reflect.Slice || v.Kind() == reflect.Array) && v.Type().Elem().Kind() == reflect.Uint8:
		size = max(size, v.Len())
	case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if err := b.measure(v.Index(i), depth+1, total); err != nil {
				return err
			}
		}
		size = 0
	case v.Kind() == reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if err := b.measure(it.Key(), depth+1, total); err != nil {
				return err
			}
			if err := b.measure(it.Value(), depth+1, total); err != nil {
				return err
			}
		}
		size = 0
	case v.Type() == TypeDict:
		for _, p := range v.Interface().(Dict).Pairs {
			if err := b.measure(reflect.ValueOf(p.Key), depth+1, total); err != nil {
				return err
			}
			if err := b.measure(reflect.ValueOf(p.Value), depth+1, total); err != nil {
				return err
			}
		}
		size = 0
	}
	*total += size
	if b.limits.Output > 0 && *total > b.limits.Output {
		return b.fail("a value exceeds %s output limit", byteSize(b.limits.Output))
	}
	return nil
}

// Assign checks that storing value into the container target ({% set ns.x = value %})
// makes no cycle, which would make every later walk over target endless, and that target
// stays within the limits afterwards (checked by the caller once stored, with Value).
func (b *Budget) Assign(target, value *Value) error {
	if b == nil {
		return nil
	}
	if b.err != nil {
		return b.err
	}
	t := target.getResolvedValue()
	if t.Kind() != reflect.Map || t.IsNil() {
		return nil
	}
	count := 0
	if b.reaches(reflect.ValueOf(value), t.Pointer(), 0, &count) {
		return b.fail("a value cannot contain itself")
	}
	return b.Err()
}

// reaches reports whether v leads to the map at p. Values already passed Value, so the walk
// is as bounded as Measure; count stops it early if not.
func (b *Budget) reaches(v reflect.Value, p uintptr, depth int, count *int) bool {
	*count++
	switch {
	case b.err != nil:
		return false
	case b.limits.Depth > 0 && depth > b.limits.Depth:
		b.fail("nesting deeper than %d", b.limits.Depth)
		return false
	case b.limits.Output > 0 && *count > b.limits.Output:
		b.fail("a value exceeds %s output limit", byteSize(b.limits.Output))
		return false
	}
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) && !v.IsNil() {
		if v.Type() == typeOfValuePtr {
			v = v.Interface().(*Value).Val
			continue
		}
		if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct && v.Elem().Type() != TypeDict {
			return false
		}
		v = v.Elem()
	}
	switch {
	case !v.IsValid():
	case v.Kind() == reflect.Map:
		if v.Pointer() == p {
			return true
		}
		it := v.MapRange()
		for it.Next() {
			if b.reaches(it.Value(), p, depth+1, count) {
				return true
			}
		}
	case (v.Kind() == reflect.Slice || v.Kind() == reflect.Array) && v.Type().Elem().Kind() != reflect.Uint8:
		for i := 0; i < v.Len(); i++ {
			if b.reaches(v.Index(i), p, depth+1, count) {
				return true
			}
		}
	case v.Kind() == reflect.Struct && v.Type() == TypeDict:
		for _, pair := range v.Interface().(Dict).Pairs {
			if b.reaches(reflect.ValueOf(pair.Value), p, depth+1, count) {
				return true
			}
		}
	}
	return false
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

// AddSizes and MulSizes return a+b and a*b, or -1 (past int) rather than overflow.
func AddSizes(a, b int) int {
	if a < 0 || b < 0 || a > int(^uint(0)>>1)-b {
		return -1
	}
	return a + b
}

func MulSizes(a, b int) int {
	if a < 0 || b < 0 || a != 0 && b > int(^uint(0)>>1)/a {
		return -1
	}
	return a * b
}

// byteSize writes n bytes the way a limit is written: 1 MiB, 64 KiB, 100 bytes.
func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
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
