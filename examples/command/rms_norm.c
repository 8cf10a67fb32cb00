/*
 * rms_norm.c: RMSNorm as Qwen3 and Llama define it, as a program normdiff can check.
 *
 *   cc -O2 -o rms_norm rms_norm.c -lm
 *   normdiff check --command ./rms_norm --op rms_norm --convention qwen3
 *
 * Build it with -DEPS_OUTSIDE to get the classic bug, eps outside the square root
 * (x / (sqrt(mean(x^2)) + eps)), and watch `check` catch it on the tiny-RMS cases:
 *
 *   cc -O2 -DEPS_OUTSIDE -o rms_norm_bug rms_norm.c -lm
 *   normdiff check --command ./rms_norm_bug --op rms_norm --convention qwen3
 *
 * Protocol (README, "Checking code in another language"): normdiff runs
 *   ./rms_norm INPUT.safetensors OUTPUT.safetensors
 * INPUT holds x (rows x width) and weight (width) in the case dtype: F32, BF16 or F16; eps and the
 * op are in the environment (NORMDIFF_EPS, NORMDIFF_OP) and in the file's metadata. The program
 * writes OUTPUT with one tensor "y" shaped like x, in the same dtype, and exits 0.
 *
 * What it computes (the qwen3 contract, HF's Qwen3RMSNorm / LlamaRMSNorm):
 *   r = 1 / sqrt(mean(x^2) + eps)      in float32 (the sum of squares accumulated in double)
 *   y = w * round(x * r)               round(): to the input dtype, then the product rounded again
 *
 * The safetensors reader here finds the tensors with plain string search in the JSON header. That
 * is enough for the files normdiff writes; a real program should use a JSON parser or a
 * safetensors library.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, const char *detail) {
    fprintf(stderr, "rms_norm: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(2);
}

/* ---- bfloat16 and float16 <-> float32, round to nearest even (as ml_dtypes and torch do) ---- */

static float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
    if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact */
        float f = (float)mant * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31) u = sign | 0x7f800000u | (mant << 13); /* inf, NaN */
    else u = sign | ((exp + 112u) << 23) | (mant << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t float_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
    if (u >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520 rounds to inf */
    if (u < 0x38800000u) {                       /* below 2^-14: a subnormal (or zero) */
        float a;
        memcpy(&a, &u, 4);
        a *= 16777216.0f;                        /* exact: the value in units of 2^-24 */
        a = (a + 8388608.0f) - 8388608.0f;       /* round to an integer, ties to even */
        return sign | (uint16_t)a;               /* 1024 is the smallest normal: still right */
    }
    return sign | (uint16_t)((u - 0x38000000u + 0xfffu + ((u >> 13) & 1u)) >> 13);
}

/* ---- a minimal safetensors reader and writer ---- */

typedef struct {
    char dtype[8];
    long shape[8];
    int ndim;
    size_t count;
    const unsigned char *data; /* into the file's buffer */
} Tensor;

static unsigned char *read_all(const char *path, size_t *size) {
    FILE *fh = fopen(path, "rb");
    if (!fh) die("cannot open input", path);
    fseek(fh, 0, SEEK_END);
    *size = (size_t)ftell(fh);
    fseek(fh, 0, SEEK_SET);
    unsigned char *buf = malloc(*size + 1);
    if (!buf || fread(buf, 1, *size, fh) != *size) die("cannot read input", path);
    fclose(fh);
    return buf;
}

/* Find tensor `name` in the header (a NUL-terminated copy) and point into the data block. */
static Tensor find_tensor(const char *header, const unsigned char *data, const char *name) {
    Tensor t = {0};
    char key[64];
    snprintf(key, sizeof key, "\"%s\"", name);
    const char *p = header;
    for (;;) { /* the key, followed by optional spaces and a colon */
        p = strstr(p, key);
        if (!p) die("no such tensor in the input", name);
        p += strlen(key);
        while (*p == ' ') p++;
        if (*p == ':') break;
    }
    const char *end = strchr(p, '}'); /* a tensor's entry has no nested objects */
    const char *d = strstr(p, "\"dtype\""), *s = strstr(p, "\"shape\""), *o = strstr(p, "\"data_offsets\"");
    if (!end || !d || !s || !o || d > end || s > end || o > end) die("malformed header entry", name);
    d = strchr(d + 7, '"');
    sscanf(d + 1, "%7[^\"]", t.dtype);
    s = strchr(s, '[');
    t.count = 1;
    for (s++; *s != ']' && t.ndim < 8; t.ndim++) {
        char *next;
        t.shape[t.ndim] = strtol(s, &next, 10);
        t.count *= (size_t)t.shape[t.ndim];
        s = next;
        while (*s == ',' || *s == ' ') s++;
    }
    long begin = strtol(strchr(o, '[') + 1, NULL, 10);
    t.data = data + begin;
    return t;
}

static float load(const Tensor *t, size_t i) {
    uint16_t h;
    float f;
    if (!strcmp(t->dtype, "F32")) { memcpy(&f, t->data + 4 * i, 4); return f; }
    memcpy(&h, t->data + 2 * i, 2);
    if (!strcmp(t->dtype, "BF16")) return bf16_to_float(h);
    if (!strcmp(t->dtype, "F16")) return f16_to_float(h);
    die("unsupported dtype (F32, BF16, F16)", t->dtype);
    return 0;
}

/* float32 -> the tensor's dtype and back: the rounding a value stored in that dtype gets */
static float round_to(const char *dtype, float f) {
    if (!strcmp(dtype, "BF16")) return bf16_to_float(float_to_bf16(f));
    if (!strcmp(dtype, "F16")) return f16_to_float(float_to_f16(f));
    return f;
}

static void write_output(const char *path, const Tensor *like, const float *y) {
    int two = strcmp(like->dtype, "F32") != 0;
    size_t bytes = like->count * (two ? 2 : 4);
    char header[512], shape[256] = "";
    for (int i = 0; i < like->ndim; i++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%ld", i ? "," : "", like->shape[i]);
    int n = snprintf(header, sizeof header, "{\"y\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[0,%zu]}}",
                     like->dtype, shape, bytes);
    while (n % 8) header[n++] = ' '; /* pad: the data starts 8-byte aligned */
    uint64_t len = (uint64_t)n;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(len >> (8 * i));
    FILE *fh = fopen(path, "wb");
    if (!fh) die("cannot open output", path);
    fwrite(le, 1, 8, fh);
    fwrite(header, 1, (size_t)n, fh);
    for (size_t i = 0; i < like->count; i++) {
        if (!two) { fwrite(&y[i], 4, 1, fh); continue; }
        uint16_t h = !strcmp(like->dtype, "BF16") ? float_to_bf16(y[i]) : float_to_f16(y[i]);
        fwrite(&h, 2, 1, fh); /* the file is little-endian, as is every machine this runs on */
    }
    if (fclose(fh)) die("cannot write output", path);
}

int main(int argc, char **argv) {
    if (argc < 3) die("usage", "rms_norm INPUT.safetensors OUTPUT.safetensors");
    const char *op = getenv("NORMDIFF_OP"), *eps_text = getenv("NORMDIFF_EPS");
    if (op && strcmp(op, "rms_norm")) die("this program implements rms_norm only, not", op);
    if (!eps_text) die("NORMDIFF_EPS is not set", "run me through normdiff");
    float eps = strtof(eps_text, NULL);

    size_t size;
    unsigned char *file = read_all(argv[argc - 2], &size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | file[i];
    if (size < 8 || n > size - 8) die("not a safetensors file", argv[argc - 2]);
    char *header = malloc(n + 1);
    memcpy(header, file + 8, n);
    header[n] = 0;
    const unsigned char *data = file + 8 + n;
    Tensor x = find_tensor(header, data, "x"), w = find_tensor(header, data, "weight");

    size_t width = (size_t)x.shape[x.ndim - 1], rows = x.count / width;
    if (w.count != width) die("weight and x disagree on the width", NULL);
    float *y = malloc(x.count * sizeof *y);
    for (size_t r = 0; r < rows; r++) {
        double sum = 0.0;
        for (size_t i = 0; i < width; i++) {
            float v = load(&x, r * width + i);
            sum += (double)v * v;
        }
        float mean = (float)(sum / (double)width);
#ifdef EPS_OUTSIDE
        float inv = 1.0f / (sqrtf(mean) + eps); /* the bug */
#else
        float inv = 1.0f / sqrtf(mean + eps);
#endif
        for (size_t i = 0; i < width; i++) {
            float h = round_to(x.dtype, load(&x, r * width + i) * inv); /* hidden.to(input_dtype) */
            y[r * width + i] = load(&w, i) * h;                         /* weight * hidden */
        }
    }
    write_output(argv[argc - 1], &x, y);
    return 0;
}
