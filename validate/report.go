package validate

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Report is everything one validation found: kernels, model, or both.
type Report struct {
	Kernels *KernelReport `json:"kernels,omitempty"`
	Model   *ModelReport  `json:"model,omitempty"`
	// ModelDir and Reference name what the model check compared.
	ModelDir  string `json:"model_dir,omitempty"`
	Reference string `json:"reference,omitempty"`
	// NotChecked names each check that did not run, and why: a report never
	// passes in silence over what it left out.
	NotChecked []string `json:"not_checked,omitempty"`
	Status     string   `json:"status"`
}

// Finish sets Status: FAIL when any check failed.
func (r *Report) Finish() {
	r.Status = Pass
	if r.Kernels != nil && !r.Kernels.Passed() || r.Model != nil && r.Model.Status == Fail {
		r.Status = Fail
	}
}

// KernelRow is the worst of one backend's results for one case.
type KernelRow struct {
	Backend  string
	Case     string
	Checks   int
	WorstErr float64
	Tol      float64
	QuantErr float64 // mean over inputs
	Status   string
}

// Rows sums the kernel results per backend and case, in the order run.
func (k *KernelReport) Rows() []KernelRow {
	var rows []KernelRow
	index := map[string]int{}
	for _, r := range k.Results {
		op := "matvec"
		if r.N > 1 {
			op = fmt.Sprintf("matmul n=%d", r.N)
		}
		name := fmt.Sprintf("%-4s %-6s %s", r.Format, r.Act, op)
		key := r.Backend + "/" + name
		i, ok := index[key]
		if !ok {
			i = len(rows)
			index[key] = i
			rows = append(rows, KernelRow{Backend: r.Backend, Case: name, Tol: r.Tol, Status: Pass})
		}
		row := &rows[i]
		row.Checks++
		if math.IsNaN(r.RelErr) || r.RelErr > row.WorstErr {
			row.WorstErr = r.RelErr
		}
		row.QuantErr += (r.QuantErr - row.QuantErr) / float64(row.Checks)
		if r.Status != Pass {
			row.Status = Fail
		}
	}
	return rows
}

// WriteText prints the report as a terminal table.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	b.WriteString("ACCURACY VALIDATION REPORT\n")
	if k := r.Kernels; k != nil {
		fmt.Fprintf(&b, "seed %d (replay with --seed %d)\n", k.Seed, k.Seed)
		rows := k.Rows()
		for _, be := range k.Backends {
			if be.Status == Skipped {
				fmt.Fprintf(&b, "kernels (%s): skipped (%s)\n", be.Backend, be.Reason)
				continue
			}
			fmt.Fprintf(&b, "kernels (%s): %d/%d passed\n", be.Backend, be.Passed, be.Total)
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  product\tchecks\tworst rel_err\ttol\tmean error vs original weights\t")
			for _, row := range rows {
				if row.Backend == be.Backend {
					fmt.Fprintf(tw, "  %s\t%d\t%.2e\t%.4f\t%.4f\t%s\n", row.Case, row.Checks, row.WorstErr, row.Tol, row.QuantErr, row.Status)
				}
			}
			tw.Flush()
		}
	}
	if m := r.Model; m != nil {
		fmt.Fprintf(&b, "model (%s vs %s, %d positions, %s KV cache):\n", r.ModelDir, r.Reference, m.Positions, m.KVCache)
		if m.ReferenceWeights != "" {
			fmt.Fprintf(&b, "  reference: %s\n", m.ReferenceWeights)
		}
		fmt.Fprintf(&b, "  KLD mean %.4f  median %.4f  p99 %.4f  top-1 %.1f%%  PPL %.3f -> %.3f (%+.1f%%)  %s\n",
			m.KLDMean, m.KLDMedian, m.KLDP99, 100*m.Top1, m.PPLRef, m.PPL, 100*(m.PPLRatio-1), m.Status)
		fmt.Fprintf(&b, "  thresholds (%s): KLD mean <= %g, p99 <= %g, top-1 >= %.0f%%, PPL ratio <= %g\n",
			m.Format, m.Thresholds.MaxKLDMean, m.Thresholds.MaxKLDP99, 100*m.Thresholds.MinTop1, m.Thresholds.MaxPPLRatio)
		b.WriteString("  hidden-state rel. error by layer:")
		for l, e := range m.LayerRelErr {
			fmt.Fprintf(&b, " %s %.3f", layerName(l), e)
		}
		b.WriteString("\n")
		for _, f := range m.Failures {
			fmt.Fprintf(&b, "  FAIL: %s\n", f)
		}
		if c := m.Chat; c != nil {
			fmt.Fprintf(&b, "  chat (its template, %d positions): KLD mean %.4f  p99 %.4f  top-1 %.1f%%  PPL %+.1f%%  %s\n",
				c.Positions, c.KLDMean, c.KLDP99, 100*c.Top1, 100*(c.PPLRatio-1), c.Status)
		}
		for _, c := range m.KVCaches {
			fmt.Fprintf(&b, "  %s cache alone (reference vs reference with f32): KLD mean %.2g  p99 %.2g  top-1 %.1f%%  PPL %+.3f%%  %s\n",
				strings.TrimPrefix(c.Format, "kv "), c.KLDMean, c.KLDP99, 100*c.Top1, 100*(c.PPLRatio-1), c.Status)
		}
	}
	for _, n := range r.NotChecked {
		fmt.Fprintf(&b, "not checked: %s\n", n)
	}
	fmt.Fprintf(&b, "result: %s\n", r.Status)
	_, err := io.WriteString(w, b.String())
	return err
}

func layerName(l int) string {
	if l == 0 {
		return "emb"
	}
	return fmt.Sprint(l)
}

// WriteHTML writes a self-contained page (no scripts, no external files)
// with the tables and SVG plots of the per-layer error and of the KL
// divergence distribution.
func (r *Report) WriteHTML(w io.Writer) error {
	data := struct {
		R       *Report
		Rows    []KernelRow
		Layers  template.HTML
		KLDHist template.HTML
	}{R: r}
	if r.Kernels != nil {
		data.Rows = r.Kernels.Rows()
	}
	if m := r.Model; m != nil {
		names := make([]string, len(m.LayerRelErr))
		for i := range names {
			names[i] = layerName(i)
		}
		data.Layers = barChart("hidden-state relative L2 error after each layer", names, m.LayerRelErr, "%.3f")
		data.KLDHist = histogram(m.KLD)
	}
	return reportTemplate.Execute(w, data)
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct": func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) },
	"f4":  func(f float64) string { return fmt.Sprintf("%.4f", f) },
	"e2":  func(f float64) string { return fmt.Sprintf("%.2e", f) },
}).Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>lowbit validation report</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:60em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.PASS{color:#1a7f37;font-weight:bold}.FAIL{color:#c62828;font-weight:bold}.SKIPPED{color:#888}
</style></head><body>
<h1>Accuracy validation report: <span class="{{.R.Status}}">{{.R.Status}}</span></h1>
{{with .R.Kernels}}<h2>Kernels</h2>
<p>Seed {{.Seed}} (replay with <code>--seed {{.Seed}}</code>). Each product is compared with a float64
reference computed from the same packed weights by independent code.</p>
<ul>{{range .Backends}}<li>{{.Backend}}: <span class="{{.Status}}">{{.Status}}</span> {{if eq .Status "SKIPPED"}}({{.Reason}}){{else}}{{.Passed}}/{{.Total}} passed{{end}}</li>{{end}}</ul>
<table><tr><th>backend</th><th>product</th><th>checks</th><th>worst rel. error</th><th>tolerance</th><th>error vs original weights</th><th></th></tr>
{{range $.Rows}}<tr><td>{{.Backend}}</td><td>{{.Case}}</td><td>{{.Checks}}</td><td>{{e2 .WorstErr}}</td><td>{{f4 .Tol}}</td><td>{{f4 .QuantErr}}</td><td class="{{.Status}}">{{.Status}}</td></tr>
{{end}}</table>{{end}}
{{with .R.Model}}<h2>Model</h2>
<p>{{$.R.ModelDir}} against {{$.R.Reference}}{{with .ReferenceWeights}} ({{.}}){{end}}, {{.Positions}} positions.</p>
<table><tr><th>measure</th><th>value</th><th>threshold</th></tr>
<tr><td>KL divergence, mean</td><td>{{f4 .KLDMean}}</td><td>&le; {{.Thresholds.MaxKLDMean}}</td></tr>
<tr><td>KL divergence, median</td><td>{{f4 .KLDMedian}}</td><td></td></tr>
<tr><td>KL divergence, 99th percentile</td><td>{{f4 .KLDP99}}</td><td>&le; {{.Thresholds.MaxKLDP99}}</td></tr>
<tr><td>top-1 agreement</td><td>{{pct .Top1}}</td><td>&ge; {{pct .Thresholds.MinTop1}}</td></tr>
<tr><td>perplexity, reference</td><td>{{f4 .PPLRef}}</td><td></td></tr>
<tr><td>perplexity, quantized</td><td>{{f4 .PPL}}</td><td>ratio &le; {{.Thresholds.MaxPPLRatio}}</td></tr>
</table>
{{range .Failures}}<p class="FAIL">{{.}}</p>{{end}}
{{$.Layers}}
{{$.KLDHist}}
{{end}}
</body></html>
`))

// barChart draws one bar per value as inline SVG.
func barChart(title string, names []string, values []float64, format string) template.HTML {
	const w, h, pad = 640.0, 240.0, 40.0
	top := 0.0
	for _, v := range values {
		if !math.IsNaN(v) {
			top = math.Max(top, v)
		}
	}
	if top == 0 {
		top = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<figure><figcaption>%s</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" role="img">`, template.HTMLEscapeString(title), w, h+pad)
	bw := (w - pad) / float64(max(len(values), 1))
	for i, v := range values {
		bh := 0.0
		if !math.IsNaN(v) {
			bh = v / top * (h - pad)
		}
		x := pad + float64(i)*bw
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4c72b0"><title>%s: `+format+`</title></rect>`, x+2, h-bh, bw-4, bh, template.HTMLEscapeString(names[i]), v)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`, x+bw/2, h+14, template.HTMLEscapeString(names[i]))
	}
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#333"/>`, pad, h, w, h)
	fmt.Fprintf(&b, `<text x="2" y="%g" font-size="11">`+format+`</text><text x="2" y="%g" font-size="11">0</text>`, pad/2+4, top, h)
	b.WriteString(`</svg></figure>`)
	return template.HTML(b.String())
}

// histogram draws the distribution of per-position KL divergences, in 40
// bins up to the 99.5th percentile (the rest in the last bin).
func histogram(kld []float64) template.HTML {
	if len(kld) == 0 {
		return ""
	}
	sorted := slices.Clone(kld)
	slices.Sort(sorted)
	hi := quantile(sorted, 0.995)
	if hi <= 0 {
		hi = math.Max(sorted[len(sorted)-1], 1e-9)
	}
	const bins = 40
	counts := make([]float64, bins)
	for _, k := range kld {
		i := int(k / hi * bins)
		counts[min(max(i, 0), bins-1)]++
	}
	names := make([]string, bins)
	for i := range names {
		if i%8 == 0 {
			names[i] = fmt.Sprintf("%.3g", float64(i)*hi/bins)
		}
	}
	return barChart(fmt.Sprintf("KL divergence per position (%d positions; bins of %.3g nats)", len(kld), hi/bins), names, counts, "%.0f")
}

// jsonFloat is a figure as JSON holds it: a failed check's NaN or Inf
// becomes null instead of making the whole report unwritable.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	x := float64(f)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(x)
}

func jsonFloats(xs []float64) []jsonFloat {
	if xs == nil {
		return nil
	}
	out := make([]jsonFloat, len(xs))
	for i, x := range xs {
		out[i] = jsonFloat(x)
	}
	return out
}

// MarshalJSON writes the report's figures with jsonFloat.
func (m ModelReport) MarshalJSON() ([]byte, error) {
	type plain ModelReport
	return json.Marshal(struct {
		plain
		LayerRelErr []jsonFloat `json:"layer_rel_err"`
		KLDMean     jsonFloat   `json:"kld_mean"`
		KLDMedian   jsonFloat   `json:"kld_median"`
		KLDP99      jsonFloat   `json:"kld_p99"`
		KLDMax      jsonFloat   `json:"kld_max"`
		Top1        jsonFloat   `json:"top1_agreement"`
		PPL         jsonFloat   `json:"ppl"`
		PPLRef      jsonFloat   `json:"ppl_reference"`
		PPLRatio    jsonFloat   `json:"ppl_ratio"`
		KLD         []jsonFloat `json:"kld,omitempty"`
	}{plain(m), jsonFloats(m.LayerRelErr), jsonFloat(m.KLDMean), jsonFloat(m.KLDMedian), jsonFloat(m.KLDP99), jsonFloat(m.KLDMax),
		jsonFloat(m.Top1), jsonFloat(m.PPL), jsonFloat(m.PPLRef), jsonFloat(m.PPLRatio), jsonFloats(m.KLD)})
}

// MarshalJSON writes the result's figures with jsonFloat.
func (r KernelResult) MarshalJSON() ([]byte, error) {
	type plain KernelResult
	return json.Marshal(struct {
		plain
		RelErr   jsonFloat `json:"rel_err"`
		QuantErr jsonFloat `json:"quant_err"`
	}{plain(r), jsonFloat(r.RelErr), jsonFloat(r.QuantErr)})
}
