/* The sequential pruning pass of snm_core/prune/reestimate.py (its prune_pass documents
 * the arguments): n-grams of one order, in the given order, each pruned when the
 * log-likelihood it loses is below the threshold, with its context's back-off mass, its
 * suffix's count and the suffix context's total updated at once, so that the n-grams
 * after it are scored against the model as it is then (pocolm's float-counts-prune). */
#include <math.h>
#include <stdint.h>

/* reestimate.backoff_loss for one n-gram (+inf where it cannot be scored). */
static double backoff_loss(double count, double backoff, double backoff_count,
                           double backoff_total) {
    if (!(backoff > 0.0) || !(backoff_total > backoff_count) || !(backoff_count > 0.0))
        return INFINITY;
    double own_share = backoff * backoff_count / backoff_total;
    double augmented = count + own_share;
    double others_here = backoff * (backoff_total - backoff_count) / backoff_total;
    double others_there = backoff_total - backoff_count - others_here;
    double same_elsewhere = backoff_count - own_share;
    double new_count = backoff_count + count, new_total = backoff_total + count;
    double new_backoff = backoff + count;
    double change = augmented * log(new_backoff * new_count / new_total / augmented);
    if (same_elsewhere > 0.0)
        change += same_elsewhere * log(new_count * backoff_total / (new_total * backoff_count));
    if (others_here > 0.0)
        change += others_here * log(new_backoff * backoff_total / (new_total * backoff));
    if (others_there > 0.0)
        change += others_there * log(backoff_total / new_total);
    return -change;
}

int64_t reestimate_prune_pass(const int64_t *visit, int64_t n, const uint8_t *candidate,
                              double *count, const int64_t *state, const int64_t *suffix,
                              const int64_t *suffix_state, double *backoff,
                              double *lower_count, double *lower_total,
                              const double *lower_backoff_share, double threshold) {
    int64_t pruned = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = visit[i];
        double c = count[j];
        if (!candidate[j] || !(c > 0.0))
            continue;
        int64_t h = state[j], s = suffix[j], hs = suffix_state[j];
        double loss = backoff_loss(c, backoff[h], lower_count[s] + lower_backoff_share[s],
                                   lower_total[hs]);
        if (loss < threshold) {
            count[j] = 0.0;
            backoff[h] += c;
            lower_count[s] += c;
            lower_total[hs] += c;
            pruned++;
        }
    }
    return pruned;
}
