//===- Llama2cReader.cpp - llama2.c checkpoint -> SourceModel --------------===//
// Karpathy's llama2.c legacy format (run.c): a header of 7 int32
//   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
// (vocab_size < 0 means the classifier is stored separately), then fp32
// weights: token_embedding [V,D], rms_att [L,D], wq [L,D,D], wk [L,KVD,D],
// wv [L,KVD,D], wo [L,D,D], rms_ffn [L,D], w1 [L,F,D], w2 [L,D,F],
// w3 [L,F,D], rms_final [D], freq_cis_real/imag [seq_len, head_size/2]
// (unused: RoPE is recomputed), then wcls [V,D] if not shared.
// The file size must match the header exactly. Per-layer tensors point
// into the mapping (slices of the stacked arrays). Q/K use the interleaved
// RoPE layout. The tokenizer.bin format is: int32 max_token_length, then per
// token float score, int32 length, bytes.
//===----------------------------------------------------------------------===//
#include "compiler/import/ReaderUtil.h"

#include <cstring>

namespace llmc {

namespace {

struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

constexpr int64_t kHeaderBytes = 7 * 4;
constexpr uint32_t kVersionedMagic = 0x616b3432; // "ak42": llama2.c export v1/v2

class Llama2cBuilder {
public:
  Llama2cBuilder(const std::string &path, SourceModel &m) : path_(path), m_(m) {}

  void build(const std::string &tokenizer_path) {
    file_ = MappedFile::open(path_);
    m_.buffers.push_back(file_);
    readHeader();
    checkSize();
    mapWeights();
    readTokenizer(tokenizer_path);
    validateSourceModel(m_);
  }

private:
  [[noreturn]] void fail(const std::string &problem) { importFail(path_, problem); }

  void readHeader() {
    if (file_->size() < uint64_t(kHeaderBytes))
      fail("too small for a llama2.c checkpoint (" + std::to_string(file_->size()) +
           " bytes; the header alone is 28)");
    uint32_t magic;
    std::memcpy(&magic, file_->data(), 4);
    if (magic == kVersionedMagic)
      fail("llama2.c versioned export format (magic ak42) is not supported; use the legacy "
           "format (export.py --version 0)");
    std::memcpy(&h_, file_->data(), sizeof(Header));
    const int32_t vals[] = {h_.dim, h_.hidden_dim, h_.n_layers, h_.n_heads, h_.n_kv_heads, h_.seq_len};
    const char *names[] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "seq_len"};
    for (int i = 0; i < 6; ++i)
      if (vals[i] <= 0 || vals[i] > (1 << 20))
        fail(std::string("not a llama2.c checkpoint: header field ") + names[i] + " = " +
             std::to_string(vals[i]));
    if (h_.vocab_size == 0 || h_.vocab_size < -(1 << 22) || h_.vocab_size > (1 << 22))
      fail("not a llama2.c checkpoint: header field vocab_size = " + std::to_string(h_.vocab_size));
    shared_classifier_ = h_.vocab_size > 0;
    vocab_ = shared_classifier_ ? h_.vocab_size : -int64_t(h_.vocab_size);
    if (h_.dim % h_.n_heads != 0)
      fail("dim " + std::to_string(h_.dim) + " is not a multiple of n_heads " + std::to_string(h_.n_heads));
    if (h_.n_kv_heads > h_.n_heads || h_.n_heads % h_.n_kv_heads != 0)
      fail("n_heads " + std::to_string(h_.n_heads) + " is not a multiple of n_kv_heads " +
           std::to_string(h_.n_kv_heads));
    head_size_ = h_.dim / h_.n_heads;
    if (head_size_ % 2 != 0)
      fail("head size " + std::to_string(head_size_) + " is odd (RoPE needs pairs)");
    kv_dim_ = int64_t(h_.n_kv_heads) * head_size_;

    ModelConfig &c = m_.config;
    c.architecture = "llama";
    c.name = baseName(path_);
    c.vocab_size = vocab_;
    c.hidden_size = h_.dim;
    c.intermediate_size = h_.hidden_dim;
    c.num_layers = h_.n_layers;
    c.num_heads = h_.n_heads;
    c.num_kv_heads = h_.n_kv_heads;
    c.head_dim = head_size_;
    c.context_length = h_.seq_len;
    c.rope_theta = 10000.0;
    c.rope_style = RopeStyle::Interleaved;
    c.norm_eps = 1e-5;
    c.tied_embeddings = shared_classifier_;
  }

  static std::string baseName(const std::string &path) {
    size_t slash = path.find_last_of('/');
    std::string b = slash == std::string::npos ? path : path.substr(slash + 1);
    size_t dot = b.rfind('.');
    return dot == std::string::npos || dot == 0 ? b : b.substr(0, dot);
  }

  // Bytes the header implies (computed in 128 bits: header values are untrusted).
  __int128 expectedBytes() const {
    const __int128 D = h_.dim, F = h_.hidden_dim, L = h_.n_layers, V = vocab_, KVD = kv_dim_;
    // rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3
    const __int128 per_layer = D + D * D + 2 * KVD * D + D * D + D + 3 * F * D;
    __int128 floats = V * D + L * per_layer + D + __int128(h_.seq_len) * head_size_; // + freq_cis
    if (!shared_classifier_)
      floats += V * D;
    return kHeaderBytes + 4 * floats;
  }

  void checkSize() {
    const __int128 want = expectedBytes();
    if (want != __int128(file_->size())) {
      const bool huge = want > (__int128(1) << 62);
      fail("file size " + std::to_string(file_->size()) + " does not match the header (dim " +
           std::to_string(h_.dim) + ", hidden " + std::to_string(h_.hidden_dim) + ", layers " +
           std::to_string(h_.n_layers) + ", heads " + std::to_string(h_.n_heads) + "/" +
           std::to_string(h_.n_kv_heads) + ", vocab " + std::to_string(h_.vocab_size) +
           ", seq_len " + std::to_string(h_.seq_len) + "), which needs " +
           (huge ? std::string("an impossible number of") : std::to_string(int64_t(want))) +
           " bytes" + (want > __int128(file_->size()) ? " (truncated, or not a llama2.c file?)" : ""));
    }
  }

  // Takes `count` floats at the cursor.
  const uint8_t *take(int64_t count) {
    const uint8_t *p = file_->data() + pos_;
    pos_ += 4 * count;
    return p;
  }

  void add(const std::string &name, std::vector<int64_t> shape, const uint8_t *data) {
    SourceTensor t;
    t.name = name;
    t.dtype = DType::F32;
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    t.shape = std::move(shape);
    t.data = data;
    t.nbytes = 4 * n;
    m_.tensors.push_back(std::move(t));
  }

  // A stacked [L, rows, cols] array split into per-layer tensors.
  void addPerLayer(const char *suffix, int64_t rows, int64_t cols) {
    const uint8_t *base = take(int64_t(h_.n_layers) * rows * cols);
    for (int64_t l = 0; l < h_.n_layers; ++l) {
      std::vector<int64_t> shape = rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{rows, cols};
      add("blk." + std::to_string(l) + "." + suffix, shape, base + 4 * l * rows * cols);
    }
  }

  void mapWeights() {
    const int64_t D = h_.dim, F = h_.hidden_dim, V = vocab_, KVD = kv_dim_;
    pos_ = kHeaderBytes;
    add("token_embd.weight", {V, D}, take(V * D));
    addPerLayer("attn_norm.weight", 1, D);
    addPerLayer("attn_q.weight", D, D);
    addPerLayer("attn_k.weight", KVD, D);
    addPerLayer("attn_v.weight", KVD, D);
    addPerLayer("attn_output.weight", D, D);
    addPerLayer("ffn_norm.weight", 1, D);
    addPerLayer("ffn_gate.weight", F, D); // w1
    addPerLayer("ffn_down.weight", D, F); // w2
    addPerLayer("ffn_up.weight", F, D);   // w3
    add("output_norm.weight", {D}, take(D));
    take(int64_t(h_.seq_len) * head_size_ / 2); // freq_cis_real
    take(int64_t(h_.seq_len) * head_size_ / 2); // freq_cis_imag
    if (!shared_classifier_)
      add("output.weight", {V, D}, take(V * D));
  }

  //===- tokenizer ---------------------------------------------------------===//

  void readTokenizer(const std::string &explicit_path) {
    std::string tpath = explicit_path;
    if (tpath.empty()) {
      const std::string dir = parentDir(path_);
      for (const std::string &cand : {joinPath(dir, "tokenizer.bin"),
                                      joinPath(dir, "tok" + std::to_string(vocab_) + ".bin")})
        if (fileExists(cand)) {
          tpath = cand;
          break;
        }
      if (tpath.empty()) {
        m_.metadata.emplace_back("tokenizer.missing", "no tokenizer.bin beside the checkpoint");
        return;
      }
    }
    m_.tokenizer = readTokenizerBin(tpath);
    m_.metadata.emplace_back("llama2c.tokenizer", tpath);
  }

  TokenizerData readTokenizerBin(const std::string &tpath) {
    auto f = MappedFile::open(tpath);
    const uint8_t *p = f->data();
    const uint64_t size = f->size();
    uint64_t pos = 0;
    auto need = [&](uint64_t n, const std::string &what) {
      if (n > size - pos)
        importFail(tpath, "truncated tokenizer file while reading " + what);
    };
    need(4, "the header");
    int32_t max_len;
    std::memcpy(&max_len, p, 4);
    pos = 4;
    if (max_len <= 0 || max_len > (1 << 16))
      importFail(tpath, "not a llama2.c tokenizer: max_token_length = " + std::to_string(max_len));

    TokenizerData tok;
    tok.kind = "llama";
    tok.pre = "default";
    tok.tokens.reserve(size_t(vocab_));
    tok.scores.reserve(size_t(vocab_));
    for (int64_t i = 0; i < vocab_; ++i) {
      const std::string what = "token " + std::to_string(i);
      need(8, what);
      float score;
      int32_t len;
      std::memcpy(&score, p + pos, 4);
      std::memcpy(&len, p + pos + 4, 4);
      pos += 8;
      if (len < 0 || len > max_len)
        importFail(tpath, what + " has length " + std::to_string(len) +
                              " (max_token_length " + std::to_string(max_len) + ")");
      need(uint64_t(len), what);
      tok.tokens.emplace_back(reinterpret_cast<const char *>(p + pos), size_t(len));
      tok.scores.push_back(score);
      pos += uint64_t(len);
    }
    if (pos != size)
      m_.metadata.emplace_back("llama2c.tokenizer_note",
                               std::to_string(size - pos) + " trailing bytes ignored");

    // llama2.c's export writes pieces with spaces instead of U+2581 and
    // BOS/EOS as "\n<s>\n" / "\n</s>\n"; restore SentencePiece spelling.
    tok.token_types.assign(tok.tokens.size(), 1);
    for (size_t i = 0; i < tok.tokens.size(); ++i) {
      std::string &t = tok.tokens[i];
      if (t == "\n<s>\n")
        t = "<s>";
      else if (t == "\n</s>\n")
        t = "</s>";
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>')
        tok.token_types[i] = 6;
      else if (t == "<s>" || t == "</s>")
        tok.token_types[i] = 3;
      else if (t == "<unk>")
        tok.token_types[i] = 2;
      else
        t = spacesToMetaspace(t);
    }
    if (vocab_ > 2) {
      tok.unk_id = 0;
      tok.bos_id = 1;
      tok.eos_id = 2;
    }
    tok.add_bos = true;
    tok.add_space_prefix = true;
    return tok;
  }

  static std::string spacesToMetaspace(const std::string &s) {
    std::string out;
    out.reserve(s.size());
    for (char ch : s) {
      if (ch == ' ')
        out += "\xe2\x96\x81";
      else
        out += ch;
    }
    return out;
  }

  std::string path_;
  SourceModel &m_;
  std::shared_ptr<MappedFile> file_;
  Header h_{};
  bool shared_classifier_ = true;
  int64_t vocab_ = 0, head_size_ = 0, kv_dim_ = 0;
  uint64_t pos_ = 0;
};

} // namespace

SourceModel readLlama2c(const std::string &path, const std::string &tokenizer_path) {
  SourceModel m;
  m.format = "llama2c";
  m.path = path;
  Llama2cBuilder(path, m).build(tokenizer_path);
  return m;
}

} // namespace llmc
