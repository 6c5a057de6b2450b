package pystring

import "unicode/utf8"

// RuneSet returns a test of whether a rune is in set, as strings.ContainsRune(set, r), that
// takes constant time (lowbit patch: stripping n runes with a set of m took n*m).
func RuneSet(set string) func(rune) bool {
	var ascii [utf8.RuneSelf]bool
	others := map[rune]bool{}
	for _, r := range set {
		if r < utf8.RuneSelf {
			ascii[r] = true
		} else {
			others[r] = true
		}
	}
	return func(r rune) bool {
		if r >= 0 && r < utf8.RuneSelf {
			return ascii[r]
		}
		return others[r]
	}
}
