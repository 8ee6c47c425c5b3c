package order

// Plan cuts a batch's rows into waves so that rows of one key bound for
// different destinations never overlap: a sink keeps order only within a
// partition. A key's rows are split into runs of consecutive rows with the
// same destination; wave n carries every key's n-th run, and a key whose
// row was left pending sends nothing more. Most keys have one run, so most
// batches are one wave. Rows without a key are all in wave 0.
type Plan struct {
	keys    []string
	wave    []int
	waves   int
	stopped map[string]bool
}

// NewPlan plans the rows at idx (in claim order) of a batch whose rows have
// the given order keys. sameDest reports whether two rows go to the same
// partition (same sink, topic and partition key). Rows not in idx are in no
// wave.
func NewPlan(keys []string, idx []int, sameDest func(i, j int) bool) *Plan {
	p := &Plan{keys: keys, wave: make([]int, len(keys)), stopped: map[string]bool{}}
	type run struct {
		n    int
		last int // the run's latest row
	}
	runs := map[string]*run{}
	for i := range p.wave {
		p.wave[i] = -1
	}
	for _, i := range idx {
		k := keys[i]
		if k == "" {
			p.wave[i] = 0
			continue
		}
		r := runs[k]
		switch {
		case r == nil:
			r = &run{}
			runs[k] = r
		case !sameDest(r.last, i):
			r.n++
		}
		r.last = i
		p.wave[i] = r.n
		p.waves = max(p.waves, r.n)
	}
	p.waves++
	return p
}

// Waves is the number of waves.
func (p *Plan) Waves() int { return p.waves }

// Wave returns the rows of wave w, in order, whose key has not stopped.
// Rows of a stopped key are returned in held, to be recorded NotSent.
func (p *Plan) Wave(w int) (send, held []int) {
	for i, n := range p.wave {
		if n != w {
			continue
		}
		if k := p.keys[i]; k != "" && p.stopped[k] {
			held = append(held, i)
			continue
		}
		send = append(send, i)
	}
	return send, held
}

// Record notes row i's result: a row left pending stops its key's later
// waves.
func (p *Plan) Record(i int, r Result) {
	if k := p.keys[i]; k != "" && r.stops() {
		p.stopped[k] = true
	}
}
