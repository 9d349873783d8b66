package wan

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Rate units. Bit units are case-insensitive; byte units must be spelled
// with a capital B so that "mb" (ambiguous) is refused rather than guessed.
var (
	bitUnits = map[string]float64{
		"": 1, "bit": 1, "bits": 1, "bps": 1,
		"k": 1e3, "kbit": 1e3, "kbits": 1e3, "kbps": 1e3,
		"m": 1e6, "mbit": 1e6, "mbits": 1e6, "mbps": 1e6,
		"g": 1e9, "gbit": 1e9, "gbits": 1e9, "gbps": 1e9,
		"t": 1e12, "tbit": 1e12, "tbits": 1e12, "tbps": 1e12,
	}
	byteUnits = map[string]float64{
		"B":  8,
		"kB": 8e3, "KB": 8e3, "MB": 8e6, "GB": 8e9, "TB": 8e12,
		"KiB": 8 << 10, "MiB": 8 << 20, "GiB": 8 << 30, "TiB": 8 << 40,
	}
)

// maxRate bounds parsed rates (1 Pbit/s); anything above is surely a typo.
const maxRate = 1e15

// ParseRate parses a link rate and returns it in bits per second; 0 means
// unlimited.
//
// Accepted forms are a non-negative decimal number followed by an optional
// unit and an optional "/s":
//
//	bits (SI, case-insensitive): bit, kbit, mbit, gbit, tbit, also k, m, g,
//	    t, bps, kbps, mbps, gbps ("100mbit", "1gbit", "200Mbit/s", "1.5G")
//	bytes (must use a capital B): B, kB/KB, MB, GB, TB (SI) and KiB, MiB,
//	    GiB, TiB (binary) ("10MB/s", "512KiB/s")
//
// A bare number is bits per second. "", "0" and "unlimited" mean unlimited.
// Lower-case "b" after a prefix ("10mb") is refused as ambiguous. Note that
// "mbps" is megabits per second here (unlike tc, where it means megabytes).
func ParseRate(s string) (int64, error) {
	in := s
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "unlimited") {
		return 0, nil
	}
	// Split into number and unit.
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	if num == "" {
		return 0, fmt.Errorf("wan: bad rate %q: want a number and a unit, like 100mbit or 10MB/s", in)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("wan: bad rate %q: bad number %q", in, num)
	}
	unit = strings.TrimSuffix(unit, "/s")
	mult, ok := byteUnits[unit]
	if !ok {
		mult, ok = bitUnits[strings.ToLower(unit)]
	}
	if !ok {
		switch strings.ToLower(unit) {
		case "b", "kb", "mb", "gb", "tb":
			return 0, fmt.Errorf("wan: bad rate %q: unit %q is ambiguous, write %sbit for bits or %sB for bytes", in, unit,
				strings.ToLower(unit[:len(unit)-1]), strings.ToUpper(unit[:len(unit)-1]))
		}
		return 0, fmt.Errorf("wan: bad rate %q: unknown unit %q (use bit, kbit, mbit, gbit for bits, B, KB, MB, GB, MiB for bytes)", in, unit)
	}
	bits := v * mult
	if math.IsInf(bits, 0) || math.IsNaN(bits) || bits > maxRate {
		return 0, fmt.Errorf("wan: bad rate %q: too large", in)
	}
	r := int64(math.Round(bits))
	if r == 0 && v != 0 {
		return 0, fmt.Errorf("wan: bad rate %q: below 1 bit/s", in)
	}
	return r, nil
}

// FormatRate formats a rate in bits per second for humans: "100 Mbit/s",
// "1.5 Gbit/s", or "unlimited" for 0.
func FormatRate(bits int64) string {
	if bits <= 0 {
		return "unlimited"
	}
	units := []struct {
		div  float64
		name string
	}{{1e12, "Tbit/s"}, {1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}}
	for _, u := range units {
		if float64(bits) >= u.div {
			return strconv.FormatFloat(float64(bits)/u.div, 'f', -1, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(bits, 10) + " bit/s"
}
