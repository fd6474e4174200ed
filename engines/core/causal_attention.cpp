// Causal attention of one prompt chunk, fp32, for the small heads of our CPU presets.
//
// Why it exists: ATen's CPU flash kernel runs at about a third of a core's fp32 peak on the
// tiny preset's heads (head_dim 32, 2 query heads over 1 KV head): a 482-token prompt's
// attention took more time than all of its matmuls (docs/benchmarks.md, "Prefill-bound").
// This kernel keeps a block of query rows (tokens x the query heads of one KV head) in
// registers and streams the keys through them as a small matrix product, so the arithmetic
// runs at matmul speed, not at the speed of per-row dot products.
//
// Per chunk and KV head: the keys are copied once, transposed ([head_dim, keys], zero-padded
// to a multiple of 32), so that a block's scores for 32 keys are 2 vector accumulators per
// row, and the values once, dense; both are read where they lie (a dense tensor, or the
// block pool through the request's block table), so the caller gathers nothing.
// Per block of rows: scores for keys 0 .. the block's last position (scaled), an exact
// softmax per row over its own causal prefix (max, exp, sum: two passes over a row that
// sits in L1/L2), then probabilities x values with each value row broadcast into the
// rows' accumulators. Masked keys (past a row's position) get probability 0 exactly, and
// every sum over keys runs in an order fixed by the row's own position: a token gets the
// same bits whichever chunk, batch or thread split it came in (ATen's kernel blocks by
// chunk, so a chunked prompt's rows round differently from the whole prompt's).
//
// Built by engines/core/native.py with the host's compiler (-O3 -march=native); GCC vector
// extensions keep it portable (AVX-512 hosts get one zmm per vector, AVX2 hosts two ymm).

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int W = 16;     // floats per vector
constexpr int MAXR = 8;   // rows per block
typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));

inline vf load(const float* p) {
    vf x;
    std::memcpy(&x, p, sizeof x);
    return x;
}

inline void store(float* p, vf x) { std::memcpy(p, &x, sizeof x); }

inline vf splat(float a) { return vf{} + a; }

inline float hmax(vf x) {
    float m = x[0];
    for (int i = 1; i < W; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

inline float hsum(vf x) {
    float s = 0.f;
    for (int i = 0; i < W; ++i) s += x[i];
    return s;
}

// exp(x) for x <= 0 (a score minus its row's max): 2^n * e^r with |r| <= ln2/2 and a
// degree-7 Taylor polynomial (truncation error under 1e-8 relative); x is clamped at -87
// so that 2^n stays a normal float. The caller zeroes masked keys itself.
inline vf exp_nonpositive(vf x) {
    const vf lo = splat(-87.0f);
    x = x < lo ? lo : x;
    const vf y = x * splat(1.44269504088896341f) + splat(0.5f);
    vf n = __builtin_convertvector(__builtin_convertvector(y, vi), vf);
    n = n > y ? n - splat(1.0f) : n;  // truncation rounded toward zero: make it floor
    const vf r = (x - n * splat(0.693359375f)) + n * splat(2.12194440e-4f);
    vf p = splat(1.0f / 5040);
    p = p * r + splat(1.0f / 720);
    p = p * r + splat(1.0f / 120);
    p = p * r + splat(1.0f / 24);
    p = p * r + splat(1.0f / 6);
    p = p * r + splat(0.5f);
    p = p * r + splat(1.0f);
    p = p * r + splat(1.0f);
    vi bits;
    std::memcpy(&bits, &p, sizeof bits);
    bits += (__builtin_convertvector(n, vi) << 23);
    std::memcpy(&p, &bits, sizeof p);
    return p;
}

struct Rows {
    const float* q[MAXR];
    float* o[MAXR];
    int limit[MAXR];  // keys this row attends to: 0 .. limit-1
};

// Scores of R rows against keys [0, end) (end a multiple of 32), scaled, into s[r * pad].
template <int R>
void scores(const Rows& rows, const float* kt, int pad, int dim, int end, float scale,
            float* s) {
    for (int j = 0; j < end; j += 2 * W) {
        vf acc0[R], acc1[R];
        for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = vf{};
        for (int d = 0; d < dim; ++d) {
            const vf k0 = load(kt + (int64_t)d * pad + j);
            const vf k1 = load(kt + (int64_t)d * pad + j + W);
            for (int r = 0; r < R; ++r) {
                const vf qd = splat(rows.q[r][d]);
                acc0[r] += qd * k0;
                acc1[r] += qd * k1;
            }
        }
        for (int r = 0; r < R; ++r) {
            store(s + (int64_t)r * pad + j, acc0[r] * splat(scale));
            store(s + (int64_t)r * pad + j + W, acc1[r] * splat(scale));
        }
    }
}

// Row r's scores become probabilities over keys [0, limit) and 0 over [limit, end);
// returns 1 / their sum.
float softmax_row(float* s, int limit, int end) {
    vf m = splat(-3.0e38f);
    int j = 0;
    for (; j + W <= limit; j += W) {
        const vf x = load(s + j);
        m = x > m ? x : m;
    }
    float mx = hmax(m);
    for (; j < limit; ++j) mx = s[j] > mx ? s[j] : mx;
    vf sum = vf{};
    const vf vm = splat(mx);
    const int full = limit - limit % W;
    for (j = 0; j < full; j += W) {
        const vf p = exp_nonpositive(load(s + j) - vm);
        store(s + j, p);
        sum += p;
    }
    float total = hsum(sum);
    if (full < end) {  // the vector holding the row's last keys: masked lanes are 0
        vf p = exp_nonpositive(load(s + full) - vm);
        for (int i = limit - full; i < W; ++i) p[i] = 0.f;
        store(s + full, p);
        total += hsum(p);
        for (j = full + W; j < end; ++j) s[j] = 0.f;
    }
    return 1.f / total;
}

// out_r = sum_j p[r][j] * v_j over keys [0, end), 32 output features at a time.
template <int R>
void weighted_values(const Rows& rows, const float* s, int pad, const float* v, int dim,
                     int end, const float* inv) {
    for (int c = 0; c < dim; c += 2 * W) {
        vf acc0[R], acc1[R];
        for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = vf{};
        for (int j = 0; j < end; ++j) {
            const float* vj = v + (int64_t)j * dim + c;
            const vf v0 = load(vj);
            const vf v1 = load(vj + W);
            for (int r = 0; r < R; ++r) {
                const vf p = splat(s[(int64_t)r * pad + j]);
                acc0[r] += p * v0;
                acc1[r] += p * v1;
            }
        }
        for (int r = 0; r < R; ++r) {
            store(rows.o[r] + c, acc0[r] * splat(inv[r]));
            store(rows.o[r] + c + W, acc1[r] * splat(inv[r]));
        }
    }
}

template <int R>
void block(const Rows& rows, const float* kt, int pad, const float* v, int dim, float scale,
           float* s) {
    int last = 0;
    for (int r = 0; r < R; ++r) last = rows.limit[r] > last ? rows.limit[r] : last;
    const int end = (last + 2 * W - 1) / (2 * W) * (2 * W);
    scores<R>(rows, kt, pad, dim, end, scale, s);
    float inv[R];
    for (int r = 0; r < R; ++r) inv[r] = softmax_row(s + (int64_t)r * pad, rows.limit[r], end);
    weighted_values<R>(rows, s, pad, v, dim, last, inv);
}

void dispatch(int n, const Rows& rows, const float* kt, int pad, const float* v, int dim,
              float scale, float* s) {
    switch (n) {
        case 1: block<1>(rows, kt, pad, v, dim, scale, s); break;
        case 2: block<2>(rows, kt, pad, v, dim, scale, s); break;
        case 3: block<3>(rows, kt, pad, v, dim, scale, s); break;
        case 4: block<4>(rows, kt, pad, v, dim, scale, s); break;
        case 5: block<5>(rows, kt, pad, v, dim, scale, s); break;
        case 6: block<6>(rows, kt, pad, v, dim, scale, s); break;
        case 7: block<7>(rows, kt, pad, v, dim, scale, s); break;
        default: block<8>(rows, kt, pad, v, dim, scale, s); break;
    }
}

// Where key (or value) j's element (head, d) lives: a dense [keys, heads, dim] tensor with
// any strides (table == nullptr: j * token), or a block pool read through a block table:
// table[j / block_size] * block + (j % block_size) * token. Strides in elements.
struct Layout {
    const float* base;
    const int64_t* table;
    int64_t block_size, block, token, head, dim;

    const float* row(int64_t j, int hk) const {
        const int64_t at = table == nullptr
                               ? j * token
                               : table[j / block_size] * block + (j % block_size) * token;
        return base + at + hk * head;
    }
};

Layout layout(const float* base, const int64_t* table, const int64_t* strides) {
    return Layout{base, table, strides[0], strides[1], strides[2], strides[3], strides[4]};
}

// [t_begin, t_end) of [0, n) as part `part` of `parts` of about equal causal work (token t
// costs start + t + 1 keys).
void share(int start, int n, int part, int parts, int* t_begin, int* t_end) {
    const int64_t total = (int64_t)n * start + (int64_t)n * (n + 1) / 2;
    int64_t acc = 0;
    int t = 0;
    for (int p = 0; p <= part; ++p) {
        if (p == part) *t_begin = t;
        const int64_t goal = p + 1 == parts ? total : total * (p + 1) / parts;
        while (t < n && acc + start + t + 1 <= goal) acc += start + t++ + 1;
    }
    *t_end = part + 1 == parts ? n : t;
}

// One chunk: queries t in [t_begin, t_end) at positions start + t over keys 0 .. start + t.
int chunk(const float* q, int64_t q_ts, int64_t q_hs, const Layout& ks, const Layout& vs,
          float* out, int64_t o_ts, int64_t o_hs, int start, int heads, int kv_heads, int dim,
          float scale, int t_begin, int t_end) {
    if (t_end <= t_begin) return 0;
    const int keys = start + t_end;
    const int pad = (keys + 2 * W - 1) / (2 * W) * (2 * W);
    const int group = heads / kv_heads;
    // Keys transposed [dim, pad], values dense [keys, dim], scores [MAXR, pad].
    float* kt = static_cast<float*>(
        std::malloc(sizeof(float) * ((size_t)pad * (dim + MAXR) + (size_t)keys * dim)));
    if (kt == nullptr) return -1;
    float* s = kt + (size_t)pad * dim;
    float* vc = s + (size_t)pad * MAXR;
    for (int hk = 0; hk < kv_heads; ++hk) {
        for (int j = 0; j < keys; ++j) {
            const float* kj = ks.row(j, hk);
            const float* vj = vs.row(j, hk);
            for (int d = 0; d < dim; ++d) kt[(size_t)d * pad + j] = kj[d * ks.dim];
            for (int d = 0; d < dim; ++d) vc[(size_t)j * dim + d] = vj[d * vs.dim];
        }
        for (int d = 0; d < dim; ++d)
            for (int j = keys; j < pad; ++j) kt[(size_t)d * pad + j] = 0.f;
        // Rows in (token, head) order, up to MAXR per block: a block's tokens are adjacent,
        // so its rows' causal limits differ by a few keys at most.
        Rows rows;
        int count = 0;
        for (int t = t_begin; t < t_end; ++t) {
            for (int g = 0; g < group; ++g) {
                const int h = hk * group + g;
                rows.q[count] = q + (int64_t)t * q_ts + (int64_t)h * q_hs;
                rows.o[count] = out + (int64_t)t * o_ts + (int64_t)h * o_hs;
                rows.limit[count] = start + t + 1;
                if (++count == MAXR) {
                    dispatch(count, rows, kt, pad, vc, dim, scale, s);
                    count = 0;
                }
            }
        }
        if (count) dispatch(count, rows, kt, pad, vc, dim, scale, s);
    }
    std::free(kt);
    return 0;
}

// One token's query heads (rows, R of them, all on KV head hk) over keys [0, limit) of a
// block pool whose keys are stored transposed per block ([dim, block_size] each, token
// stride 1, block_size a multiple of W): a decode. Keys and values are read in place,
// block by block through the table, so nothing is copied; scores go to s[r * pad].
template <int R>
void decode_rows(const Rows& rows, const Layout& ks, const Layout& vs, int hk, int dim,
                 float scale, int limit, float* s, int pad) {
    const int64_t bs = ks.block_size;
    for (int64_t b = 0; b * bs < limit; ++b) {
        const float* kb = ks.base + ks.table[b] * ks.block + hk * ks.head;
        for (int64_t t = 0; t < bs && b * bs + t < limit; t += W) {
            vf acc[R];
            for (int r = 0; r < R; ++r) acc[r] = vf{};
            for (int d = 0; d < dim; ++d) {
                const vf kd = load(kb + d * ks.dim + t);
                for (int r = 0; r < R; ++r) acc[r] += splat(rows.q[r][d]) * kd;
            }
            for (int r = 0; r < R; ++r)
                store(s + (int64_t)r * pad + b * bs + t, acc[r] * splat(scale));
        }
    }
    const int end = (limit + W - 1) / W * W;
    float inv[R];
    for (int r = 0; r < R; ++r) inv[r] = softmax_row(s + (int64_t)r * pad, limit, end);
    for (int c = 0; c < dim; c += 2 * W) {
        vf acc0[R], acc1[R];
        for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = vf{};
        for (int64_t b = 0; b * vs.block_size < limit; ++b) {
            const float* vb = vs.base + vs.table[b] * vs.block + hk * vs.head + c;
            const int64_t first = b * vs.block_size;
            const int64_t n = limit - first < vs.block_size ? limit - first : vs.block_size;
            for (int64_t t = 0; t < n; ++t) {
                const vf v0 = load(vb + t * vs.token);
                const vf v1 = load(vb + t * vs.token + W);
                for (int r = 0; r < R; ++r) {
                    const vf p = splat(s[(int64_t)r * pad + first + t]);
                    acc0[r] += p * v0;
                    acc1[r] += p * v1;
                }
            }
        }
        for (int r = 0; r < R; ++r) {
            store(rows.o[r] + c, acc0[r] * splat(inv[r]));
            store(rows.o[r] + c + W, acc1[r] * splat(inv[r]));
        }
    }
}

void decode_dispatch(int n, const Rows& rows, const Layout& ks, const Layout& vs, int hk,
                     int dim, float scale, int limit, float* s, int pad) {
    switch (n) {
        case 1: decode_rows<1>(rows, ks, vs, hk, dim, scale, limit, s, pad); break;
        case 2: decode_rows<2>(rows, ks, vs, hk, dim, scale, limit, s, pad); break;
        case 4: decode_rows<4>(rows, ks, vs, hk, dim, scale, limit, s, pad); break;
        default: decode_rows<8>(rows, ks, vs, hk, dim, scale, limit, s, pad); break;
    }
}

}  // namespace

extern "C" {

// One chunk of n tokens at positions start .. start + n - 1, each attending to keys 0 .. its
// position; this call computes part `part` of `parts` (threads split a chunk so).
// q[t * q_ts + h * q_hs + d], out the same with its strides; keys and values as Layouts
// (strides: block_size, block, token, head, dim; table may be null). Query head h reads KV
// head h / (heads / kv_heads). dim must be a multiple of 32, q and out contiguous over it.
// Returns 0, or -1 when scratch memory could not be allocated (nothing written).
int causal_attention(const float* q, int64_t q_ts, int64_t q_hs, const float* k,
                     const int64_t* k_table, const int64_t* k_strides, const float* v,
                     const int64_t* v_table, const int64_t* v_strides, float* out,
                     int64_t o_ts, int64_t o_hs, int n, int start, int heads, int kv_heads,
                     int dim, float scale, int part, int parts) {
    int t_begin = 0, t_end = 0;
    share(start, n, part, parts, &t_begin, &t_end);
    return chunk(q, q_ts, q_hs, layout(k, k_table, k_strides), layout(v, v_table, v_strides),
                 out, o_ts, o_hs, start, heads, kv_heads, dim, scale, t_begin, t_end);
}

// Several chunks packed in q, row after row: row r's tokens start at q index
// rows[r * rows_stride] and end where row r + 1's start (the last at `tokens`); its first
// token's position is positions[that index]; its keys and values are read through block
// table tables + r * table_stride. Each row is split as causal_attention splits a chunk.
int rows_attention(const float* q, int64_t q_ts, int64_t q_hs, int tokens, const int64_t* rows,
                   int64_t rows_stride, int count, const int64_t* positions,
                   const int64_t* tables, int64_t table_stride, const float* k,
                   const int64_t* k_strides, const float* v, const int64_t* v_strides,
                   float* out, int64_t o_ts, int64_t o_hs, int heads, int kv_heads, int dim,
                   float scale, int part, int parts) {
    for (int r = 0; r < count; ++r) {
        const int64_t first = rows[r * rows_stride];
        const int64_t end = r + 1 < count ? rows[(r + 1) * rows_stride] : tokens;
        if (end <= first) continue;  // an empty row (the compiled step's padding): no token
        const int start = (int)positions[first];
        const int n = (int)(end - first);
        int t_begin = 0, t_end = 0;
        share(start, n, part, parts, &t_begin, &t_end);
        const int64_t* table = tables + r * table_stride;
        const int code = chunk(q + first * q_ts, q_ts, q_hs, layout(k, table, k_strides),
                               layout(v, table, v_strides), out + first * o_ts, o_ts, o_hs,
                               start, heads, kv_heads, dim, scale, t_begin, t_end);
        if (code) return code;
    }
    return 0;
}

// One-token rows (decodes): token i (of `count`) at position positions[i] attends to keys
// 0 .. that position through block table tables + i * table_stride. Keys must be stored
// transposed per block (token stride 1) with block_size a multiple of 16, and heads /
// kv_heads must be 1, 2, 4 or 8; otherwise returns -2 and writes nothing. Tokens are split
// into `parts` (this call computes `part`). Returns -1 when scratch could not be allocated.
int decode_attention(const float* q, int64_t q_ts, int64_t q_hs, int count,
                     const int64_t* positions, const int64_t* tables, int64_t table_stride,
                     const float* k, const int64_t* k_strides, const float* v,
                     const int64_t* v_strides, float* out, int64_t o_ts, int64_t o_hs,
                     int heads, int kv_heads, int dim, float scale, int part, int parts) {
    const int group = heads / kv_heads;
    if (k_strides[2] != 1 || k_strides[0] % W || (group != 1 && group != 2 && group != 4 &&
                                                   group != 8))
        return -2;
    const int first = (int)((int64_t)count * part / parts);
    const int last = (int)((int64_t)count * (part + 1) / parts);
    int64_t longest = 0;
    for (int i = first; i < last; ++i)
        longest = positions[i] + 1 > longest ? positions[i] + 1 : longest;
    const int64_t bs = k_strides[0];
    const int64_t pad = (longest + bs - 1) / bs * bs + 2 * W;
    float* s = static_cast<float*>(std::malloc(sizeof(float) * (size_t)pad * MAXR));
    if (s == nullptr) return -1;
    for (int i = first; i < last; ++i) {
        const int64_t* table = tables + i * table_stride;
        const Layout ks = layout(k, table, k_strides), vs = layout(v, table, v_strides);
        for (int hk = 0; hk < kv_heads; ++hk) {
            Rows rows;
            for (int g = 0; g < group; ++g) {
                const int h = hk * group + g;
                rows.q[g] = q + (int64_t)i * q_ts + (int64_t)h * q_hs;
                rows.o[g] = out + (int64_t)i * o_ts + (int64_t)h * o_hs;
            }
            decode_dispatch(group, rows, ks, vs, hk, dim, scale, (int)positions[i] + 1, s,
                            (int)pad);
        }
    }
    std::free(s);
    return 0;
}

}  // extern "C"
