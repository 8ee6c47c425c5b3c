package sourcetest

// HashVectors are keys with the bucket hash both databases give them
// (PostgreSQL's ('x' || substr(md5(k), 1, 8))::bit(32)::bigint and MySQL's
// CONV(SUBSTR(MD5(k), 1, 8), 16, 10), run on each): source.Hash32 must give
// the same, and each dialect's hash expression too.
var HashVectors = []struct {
	Key  string
	Hash uint32
}{
	{"", 3558706393},
	{"a", 214005177},
	{"ffff", 3974702808},
	{"Café", 1180024084},
	{"日本", 1304351462},
	{"00000000-0000-4000-8000-000000000001", 1167882649},
	{"ü-Ω-😀", 1018659453}, // four-byte UTF-8 too
}
