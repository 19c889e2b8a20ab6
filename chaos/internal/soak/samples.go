package soak

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sample is what one 10-second tick read: a value per series, and the
// generation of the process each per-process series was read from. A
// series missing from Values was not read in that sample (a relay being
// restarted, a metric the relay does not export).
type Sample struct {
	At     time.Time          `json:"at"`
	T      float64            `json:"t"` // seconds since the run's start
	Values map[string]float64 `json:"values"`
	Gens   map[string]int     `json:"gens,omitempty"`
}

// Set records v for series (initialising the maps).
func (s *Sample) Set(series string, v float64) {
	if s.Values == nil {
		s.Values = map[string]float64{}
	}
	s.Values[series] = v
}

// SetGen records v for series, read from generation gen of its process.
func (s *Sample) SetGen(series string, v float64, gen int) {
	s.Set(series, v)
	if s.Gens == nil {
		s.Gens = map[string]int{}
	}
	s.Gens[series] = gen
}

// SeriesNames returns every series name in samples, sorted.
func SeriesNames(samples []Sample) []string {
	names := map[string]bool{}
	for _, s := range samples {
		for k := range s.Values {
			names[k] = true
		}
	}
	return slices.Sorted(maps.Keys(names))
}

// Series returns series name's points from samples, in order.
func Series(samples []Sample, name string) []Point {
	var ps []Point
	for _, s := range samples {
		if v, ok := s.Values[name]; ok {
			ps = append(ps, Point{T: s.T, V: v, Gen: s.Gens[name]})
		}
	}
	return ps
}

// WriteCSV writes samples to path as CSV: a header "t,at," and the series
// names (sorted), a row per sample, an empty cell where a series was not
// read. Per-process series get a "gen:SERIES" column too.
func WriteCSV(path string, samples []Sample) error {
	names := SeriesNames(samples)
	var gens []string
	for _, n := range names {
		for _, s := range samples {
			if _, ok := s.Gens[n]; ok {
				gens = append(gens, n)
				break
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	w := csv.NewWriter(f)
	header := append([]string{"t", "at"}, names...)
	for _, g := range gens {
		header = append(header, "gen:"+g)
	}
	_ = w.Write(header)
	for _, s := range samples {
		row := []string{strconv.FormatFloat(s.T, 'f', 1, 64), s.At.UTC().Format(time.RFC3339)}
		for _, n := range names {
			v, ok := s.Values[n]
			if !ok || math.IsNaN(v) {
				row = append(row, "")
				continue
			}
			row = append(row, strconv.FormatFloat(v, 'g', -1, 64))
		}
		for _, g := range gens {
			if gen, ok := s.Gens[g]; ok {
				row = append(row, strconv.Itoa(gen))
			} else {
				row = append(row, "")
			}
		}
		_ = w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return fmt.Errorf("soak: writing %s: %w", path, err)
	}
	return f.Close()
}

// WriteJSON writes v to path, indented.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadCSV reads a file WriteCSV wrote back into samples (At is not kept
// to the nanosecond: the file has seconds).
func ReadCSV(path string) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("soak: reading %s: %w", path, err)
	}
	if len(rows) == 0 || len(rows[0]) < 2 || rows[0][0] != "t" {
		return nil, fmt.Errorf("soak: %s is not a samples file (no t,at header)", path)
	}
	header := rows[0]
	var out []Sample
	for _, row := range rows[1:] {
		var s Sample
		s.T, _ = strconv.ParseFloat(row[0], 64)
		s.At, _ = time.Parse(time.RFC3339, row[1])
		for i := 2; i < len(header) && i < len(row); i++ {
			if row[i] == "" {
				continue
			}
			v, err := strconv.ParseFloat(row[i], 64)
			if err != nil {
				return nil, fmt.Errorf("soak: %s: column %s: %w", path, header[i], err)
			}
			if g, ok := strings.CutPrefix(header[i], "gen:"); ok {
				if s.Gens == nil {
					s.Gens = map[string]int{}
				}
				s.Gens[g] = int(v)
				continue
			}
			s.Set(header[i], v)
		}
		out = append(out, s)
	}
	return out, nil
}
