// A hashed or packed SNM as flashlight's language model, called by the decoder without
// Python: snm.decoding.FlashlightLM builds it for such a model.
//
// flashlight calls its LM once per (hypothesis, word ending there) per frame; through
// Python each call costs more than KenLM's whole answer.  This class answers in C++, with
// the hashed layout's C loops of one state (snm_core/scoring/layouts/hashed_loops.c; their
// addresses and the model's Scorer handed over by Python): a state's features are found
// when it is first asked about, and each new (state, word) costs the word's links; one met
// before in the utterance is a lookup.  Equal SNM states share one LMState, so the decoder
// merges exactly the histories the model cannot tell apart.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <deque>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

// flashlight-text's LM interface (flashlight/lib/text/decoder/lm/LM.h, 0.0.7), declared
// again: the wheel ships no headers.  The layout and the names must stay the wheel's, since
// the decoder calls these virtual functions and pybind11 finds the base class by its name.
namespace fl {
namespace lib {
namespace text {

struct LMState {
    std::unordered_map<int, std::shared_ptr<LMState>> children;

    template <typename T>
    std::shared_ptr<T> child(int usrIdx) {
        auto s = children.find(usrIdx);
        if (s == children.end()) {
            auto state = std::make_shared<T>();
            children[usrIdx] = state;
            return state;
        }
        return std::static_pointer_cast<T>(s->second);
    }

    int compare(const std::shared_ptr<LMState>& state) const {
        LMState* inState = state.get();
        if (!state)
            throw std::runtime_error("a state is null");
        return this == inState ? 0 : (this < inState ? -1 : 1);
    }
};

using LMStatePtr = std::shared_ptr<LMState>;

class LM {
  public:
    virtual LMStatePtr start(bool startWithNothing) = 0;
    virtual std::pair<LMStatePtr, float> score(const LMStatePtr& state, const int usrTokenIdx) = 0;
    virtual std::pair<LMStatePtr, float> finish(const LMStatePtr& state) = 0;
    virtual void updateCache(std::vector<LMStatePtr>) {}
    virtual ~LM() = default;

  protected:
    std::vector<int> usrToLmIdxMap_;
};

}  // namespace text
}  // namespace lib
}  // namespace fl

namespace py = pybind11;
using fl::lib::text::LM;
using fl::lib::text::LMState;
using fl::lib::text::LMStatePtr;

namespace {

// The hashed layout's loops for one state at a time (snm_core/scoring/layouts/hashed_loops.c).
using StateFeatures = int64_t (*)(const void* scorer, const int32_t* words, int64_t length,
                                  uint64_t* keys, int64_t* types, double* m_star_sum);
using StateWord = double (*)(const void* scorer, const uint64_t* keys, const int64_t* types,
                             int64_t n, double m_star_sum, int32_t target, int64_t* matched);
using NextState = int64_t (*)(const void* scorer, const int32_t* words, int64_t length,
                              int32_t target, int64_t matched, int32_t* row);

struct Arena;

// What a state was asked about: the word, its score and the state after it, valid while
// the arena numbered `arena` (the utterance's) lives.
struct Scored {
    int word;
    float log10;
    struct SnmState* after;
    uint64_t arena;
};

// An SNM state: the words the model can still use, right-aligned in `width` slots (-1
// before them), as scorer_advance reads and writes them; the features of the state the
// model holds, found when it is first asked about; and the words scored after it.  Most
// states are never asked about (the beam drops them); one that is, about many words, the
// start state about every word of the lexicon: a short list, then an index.
struct SnmState : LMState {
    static constexpr size_t kListed = 8;
    uint64_t hash = 0;
    int64_t length = 0;
    const int32_t* words = nullptr;  // in its arena
    bool found = false;
    std::vector<uint64_t> feature_keys;
    std::vector<int64_t> feature_types;
    double m_star_sum = 0.0;
    std::vector<Scored> scored;
    std::vector<int32_t> index;  // beyond kListed: positions in scored by word, open addressing

    static size_t slot(int word, size_t mask) {
        return (static_cast<uint32_t>(word) * 2654435761u) & mask;
    }

    Scored* find(int word) {
        if (scored.size() <= kListed) {
            for (auto& s : scored)
                if (s.word == word)
                    return &s;
            return nullptr;
        }
        size_t mask = index.size() - 1;
        for (size_t at = slot(word, mask); index[at] >= 0; at = (at + 1) & mask)
            if (scored[index[at]].word == word)
                return &scored[index[at]];
        return nullptr;
    }

    void add(const Scored& answer) {
        scored.push_back(answer);
        if (scored.size() <= kListed)
            return;
        if (2 * scored.size() > index.size()) {  // at most half full: built again, larger
            index.assign(std::max<size_t>(64, 4 * index.size()), -1);
            for (size_t i = 0; i + 1 < scored.size(); i++)
                insert(scored[i].word, i);
        }
        insert(answer.word, scored.size() - 1);
    }

  private:
    void insert(int word, size_t position) {
        size_t mask = index.size() - 1, at = slot(word, mask);
        while (index[at] >= 0)
            at = (at + 1) & mask;
        index[at] = static_cast<int32_t>(position);
    }
};

// The states of one utterance, each once (equal words and length: one state), allocated
// together and freed together: the LMStatePtrs handed to the decoder share the arena's
// count (aliasing shared_ptrs), so that the many states an utterance makes cost no
// allocation each, and the arena lives while the decoder holds any of them.
struct Arena {
    static constexpr size_t kChunk = 1 << 16;  // words of a chunk of the states' words
    Arena(int64_t width, uint64_t number) : width(width), number(number), slots(1024) {}

    SnmState* canonical(const int32_t* words, int64_t length) {
        uint64_t hash = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(length + 1);
        for (int64_t j = 0; j < width; j++)  // FNV-1a over the words
            hash = (hash ^ static_cast<uint32_t>(words[j])) * 0x100000001B3ull;
        size_t mask = slots.size() - 1, at = (hash ^ (hash >> 29)) & mask;
        for (; slots[at]; at = (at + 1) & mask) {
            const SnmState* state = slots[at];
            if (state->hash == hash && state->length == length &&
                std::memcmp(state->words, words, sizeof(int32_t) * width) == 0)
                return slots[at];
        }
        states.emplace_back();
        SnmState* state = &states.back();
        state->hash = hash;
        state->length = length;
        state->words = store(words);
        slots[at] = state;
        if (2 * states.size() > slots.size())
            grow();
        return state;
    }

    const int64_t width;
    const uint64_t number;

  private:
    const int32_t* store(const int32_t* words) {
        if (chunks.empty() || used + width > kChunk) {
            chunks.emplace_back(new int32_t[kChunk > static_cast<size_t>(width) ? kChunk : width]);
            used = 0;
        }
        int32_t* at = chunks.back().get() + used;
        std::memcpy(at, words, sizeof(int32_t) * width);
        used += width;
        return at;
    }

    void grow() {
        std::vector<SnmState*> larger(2 * slots.size());
        size_t mask = larger.size() - 1;
        for (SnmState* state : slots) {
            if (!state)
                continue;
            size_t at = (state->hash ^ (state->hash >> 29)) & mask;
            while (larger[at])
                at = (at + 1) & mask;
            larger[at] = state;
        }
        slots.swap(larger);
    }

    std::deque<SnmState> states;  // stable addresses
    std::vector<std::unique_ptr<int32_t[]>> chunks;
    size_t used = 0;
    std::vector<SnmState*> slots;  // open addressing, at most half full
};

class SnmLM : public LM {
  public:
    // scorer: the address of the model's Scorer; loops: of scorer_state_features,
    // scorer_state_word and scorer_next_state; pairs: room for a state's features (tags x
    // windows); targets: the model's id of each decoder word index (int32 bytes); begin,
    // null: a state after <S> and of no context (int32 bytes of `width` words) with their
    // lengths; end: </S>'s id; model: what the addresses point into, kept alive while the
    // decoder holds this LM.
    SnmLM(uintptr_t scorer, std::tuple<uintptr_t, uintptr_t, uintptr_t> loops, int64_t width,
          int64_t pairs, py::bytes targets, py::bytes begin, int64_t begin_length,
          py::bytes null, int64_t null_length, int32_t end, bool score_boundary,
          py::object model)
        : scorer_(reinterpret_cast<const void*>(scorer)),
          state_features_(reinterpret_cast<StateFeatures>(std::get<0>(loops))),
          state_word_(reinterpret_cast<StateWord>(std::get<1>(loops))),
          next_state_(reinterpret_cast<NextState>(std::get<2>(loops))),
          width_(width),
          pairs_(pairs),
          targets_(int32s(targets)),
          begin_(int32s(begin)),
          null_(int32s(null)),
          begin_length_(begin_length),
          null_length_(null_length),
          end_(end),
          score_boundary_(score_boundary),
          model_(std::move(model)),
          row_(width),
          arena_(std::make_shared<Arena>(width, ++arenas_)) {
        if (width < 1 || static_cast<int64_t>(begin_.size()) != width ||
            static_cast<int64_t>(null_.size()) != width)
            throw std::invalid_argument("a state has width words");
    }

    LMStatePtr start(bool startWithNothing) override {
        // A new arena: the last utterance's lives on while the decoder holds its states.
        arena_ = std::make_shared<Arena>(width_, ++arenas_);
        bool nothing = startWithNothing || !score_boundary_;
        return shared(arena_->canonical(nothing ? null_.data() : begin_.data(),
                                        nothing ? null_length_ : begin_length_));
    }

    std::pair<LMStatePtr, float> score(const LMStatePtr& state, const int usrTokenIdx) override {
        auto* ours = static_cast<SnmState*>(state.get());
        Scored* found = ours->find(usrTokenIdx);
        if (found && found->arena == arena_->number)  // else in an earlier utterance's arena
            return {shared(found->after), found->log10};
        if (usrTokenIdx < 0 || usrTokenIdx >= static_cast<int>(targets_.size()))
            throw std::out_of_range("word index " + std::to_string(usrTokenIdx) +
                                    " is not one of the LM's words");
        Scored answer = advance(*ours, targets_[usrTokenIdx]);
        answer.word = usrTokenIdx;
        if (found)
            *found = answer;
        else
            ours->add(answer);
        return {shared(answer.after), answer.log10};
    }

    std::pair<LMStatePtr, float> finish(const LMStatePtr& state) override {
        if (!score_boundary_)
            return {state, 0.0f};
        Scored answer = advance(*static_cast<SnmState*>(state.get()), end_);
        return {shared(answer.after), answer.log10};
    }

  private:
    static std::vector<int32_t> int32s(const py::bytes& data) {
        std::string raw = data;
        std::vector<int32_t> values(raw.size() / sizeof(int32_t));
        std::memcpy(values.data(), raw.data(), values.size() * sizeof(int32_t));
        return values;
    }

    // A state of the current arena as the decoder holds it: sharing the arena's count.
    LMStatePtr shared(SnmState* state) const { return LMStatePtr(arena_, state); }

    // log10 P(target | state) and the state after it, by the hashed layout's C loops.
    Scored advance(SnmState& state, int32_t target) {
        if (!state.found) {
            state.feature_keys.resize(pairs_);
            state.feature_types.resize(pairs_);
            int64_t n = state_features_(scorer_, state.words, state.length,
                                        state.feature_keys.data(), state.feature_types.data(),
                                        &state.m_star_sum);
            if (n < 0)
                throw std::bad_alloc();
            state.feature_keys.resize(n);
            state.feature_types.resize(n);
            state.found = true;
        }
        int64_t matched = 0;
        double prob = state_word_(scorer_, state.feature_keys.data(), state.feature_types.data(),
                                  static_cast<int64_t>(state.feature_keys.size()),
                                  state.m_star_sum, target, &matched);
        if (prob < 0)
            throw std::bad_alloc();
        int64_t length = next_state_(scorer_, state.words, state.length, target, matched,
                                     row_.data());
        float log10 = prob > 0 ? static_cast<float>(std::log10(prob))
                               : -std::numeric_limits<float>::infinity();
        return {-1, log10, arena_->canonical(row_.data(), length), arena_->number};
    }

    const void* scorer_;
    StateFeatures state_features_;
    StateWord state_word_;
    NextState next_state_;
    int64_t width_, pairs_;
    std::vector<int32_t> targets_, begin_, null_;
    int64_t begin_length_, null_length_;
    int32_t end_;
    bool score_boundary_;
    py::object model_;
    std::vector<int32_t> row_;
    uint64_t arenas_ = 0;  // arenas made (before arena_: the first is made with it)
    std::shared_ptr<Arena> arena_;
};

}  // namespace

PYBIND11_MODULE(_flashlight, m) {
    // The base class is flashlight's, registered by its decoder module.
    py::module_::import("flashlight.lib.text.decoder");
    py::class_<SnmLM, std::shared_ptr<SnmLM>, LM>(m, "SnmLM")
        .def(py::init<uintptr_t, std::tuple<uintptr_t, uintptr_t, uintptr_t>, int64_t, int64_t,
                      py::bytes, py::bytes, int64_t, py::bytes, int64_t, int32_t, bool,
                      py::object>());
}
