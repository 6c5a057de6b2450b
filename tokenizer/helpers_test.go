package tokenizer

func decodeKeepSpecial(t Tokenizer, ids []int) string {
	if m, ok := t.(*hfModel); ok {
		st := streamState{strip: -1}
		var buf []byte
		for _, id := range ids {
			buf = m.appendTokenSpecial(buf, id, &st, false)
		}
		out, _ := validPrefix(nil, buf, m.lossyPerByte(), true)
		return string(out)
	}
	return t.Decode(ids)
}

type keepSpecial struct{ *hfModel }

func (k keepSpecial) appendToken(dst []byte, id int, st *streamState) []byte {
	return k.appendTokenSpecial(dst, id, st, false)
}

func newDecoderKeepSpecial(t Tokenizer) *Decoder {
	if m, ok := t.(*hfModel); ok {
		return NewDecoder(keepSpecial{m})
	}
	return NewDecoder(t)
}
