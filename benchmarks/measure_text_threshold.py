"""The cosine-similarity threshold of text-reply clusters (``uq.action_uq.TEXT_SIMILARITY_THRESHOLD``), measured.

20 paraphrase pairs and 20 hard non-paraphrase pairs of customer-service agent replies (same topic,
another act: "change" vs "cancel", "charged" vs "refunded", a question vs its answer), embedded with the
bundled all-MiniLM-L6-v2; prints the similarity ranges and, per threshold, the share of paraphrase
pairs merged, of non-paraphrase pairs split, and the balanced accuracy; then the wall time of
``action_turn_table`` on a synthetic table with top-k log-probs (the partial responses dominate).

    python benchmarks/measure_text_threshold.py [--decisions 10] [--k 5] [--tokens 48]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd

from agentuq_nb.records.action_samples import ACTION_SAMPLE_COLUMNS
from agentuq_nb.uq.action_uq import TEXT_SIMILARITY_THRESHOLD, action_turn_table
from agentuq_nb.uq.embeddings import Embedder, default_embedder

PARA = [
 ("Could you please provide your user ID so I can look up your account?", "Can you give me your user id? I need it to find your account."),
 ("I have cancelled your reservation. You will receive a refund within 5-7 business days.", "Your reservation is now cancelled; the refund should arrive in 5 to 7 business days."),
 ("Is there anything else I can help you with today?", "Can I help you with anything else?"),
 ("I'm sorry, but basic economy tickets cannot be modified.", "Unfortunately, basic economy fares can't be changed."),
 ("Please confirm that you want to proceed with the exchange (yes/no).", "Do you want me to go ahead with the exchange? Please answer yes or no."),
 ("What is the order number of the item you want to return?", "Which order contains the item you'd like to return? Please share the order id."),
 ("I'm transferring you to a human agent now.", "Let me transfer you to a human representative."),
 ("Your order #W2378156 has been delivered.", "The order #W2378156 shows as delivered."),
 ("Could you tell me your first name, last name and zip code?", "Please share your first and last name along with your zip code."),
 ("The flight from JFK to LAX on May 20 is fully booked.", "There are no seats left on the May 20 flight from JFK to Los Angeles."),
 ("I can offer you a travel certificate of $100 as compensation.", "As compensation, I can give you a $100 travel certificate."),
 ("Which payment method would you like to use for the refund?", "How would you like the refund to be paid - which payment method?"),
 ("Your new address has been saved.", "I've updated your address."),
 ("I found two orders on your account. Which one are you asking about?", "There are two orders under your account; which one do you mean?"),
 ("Sure, I can help you change your flight.", "Of course, I'd be happy to help you modify your flight."),
 ("The total price difference is $45, which will be charged to your credit card.", "You'll be charged an extra $45 on your credit card for the difference."),
 ("I need to verify your identity before making any changes.", "Before I change anything, I have to verify who you are."),
 ("Your baggage allowance is two free checked bags.", "You can check two bags for free."),
 ("Unfortunately the item cannot be returned because it was delivered more than 30 days ago.", "I'm afraid the return window of 30 days has passed, so the item can't be returned."),
 ("Thank you for contacting us. Have a great day!", "Thanks for reaching out, have a wonderful day!"),
]
NON = [
 ("Could you please provide your user ID so I can look up your account?", "Could you please provide your order ID so I can look up the order?"),
 ("I have cancelled your reservation. You will receive a refund within 5-7 business days.", "I cannot cancel your reservation because it is not eligible for a refund."),
 ("Is there anything else I can help you with today?", "Is there anything else you would like to change in your order?"),
 ("I'm sorry, but basic economy tickets cannot be modified.", "Good news: your economy ticket can be modified for free."),
 ("Please confirm that you want to proceed with the exchange (yes/no).", "Please confirm that you want to proceed with the return (yes/no)."),
 ("What is the order number of the item you want to return?", "What is the reason you want to return the item?"),
 ("I'm transferring you to a human agent now.", "I can handle this myself, no need for a human agent."),
 ("Your order #W2378156 has been delivered.", "Your order #W2378156 has not shipped yet."),
 ("Could you tell me your first name, last name and zip code?", "Could you tell me your email address?"),
 ("The flight from JFK to LAX on May 20 is fully booked.", "The flight from JFK to LAX on May 20 has 3 seats available in economy."),
 ("I can offer you a travel certificate of $100 as compensation.", "I'm sorry, I cannot offer any compensation for this delay."),
 ("Which payment method would you like to use for the refund?", "The refund will go back to your original payment method."),
 ("Your new address has been saved.", "What is your new address?"),
 ("I found two orders on your account. Which one are you asking about?", "I found no orders on your account."),
 ("Sure, I can help you change your flight.", "Sure, I can help you cancel your flight."),
 ("The total price difference is $45, which will be charged to your credit card.", "The total price difference is $45, which will be refunded to your credit card."),
 ("I need to verify your identity before making any changes.", "I have made the changes you requested."),
 ("Your baggage allowance is two free checked bags.", "How many checked bags would you like to add?"),
 ("Unfortunately the item cannot be returned because it was delivered more than 30 days ago.", "The item can be returned; I will start the return now."),
 ("Thank you for contacting us. Have a great day!", "Before we finish, could you rate this conversation?"),
]


def similarities(embedder: Embedder, pairs: list[tuple[str, str]]) -> np.ndarray:
    a, b = embedder.embed([p[0] for p in pairs]), embedder.embed([p[1] for p in pairs])
    return np.sum(a * b, axis=1)


def synthetic_samples(decisions: int, k: int, tokens: int, top_k: int = 5, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    words = "the order flight refund please your account can I help you with today change cancel".split()
    rows = []
    for d in range(decisions):
        for s in range(k):
            toks = [" " + words[i] for i in rng.integers(0, len(words), tokens)]
            topk = [[t] + [" " + words[i] for i in rng.integers(0, len(words), top_k - 1)] for t in toks]
            lps = np.log(rng.dirichlet(np.ones(top_k), size=tokens))
            row = {c: None for c in ACTION_SAMPLE_COLUMNS}
            row.update(domain="bench", task_id="t", trial=0, seed=0, decision_idx=d, message_idx=d, turn_idx=d,
                       sample_idx=s, sampler_model="bench", sampler_kind="self", content="".join(toks), tool_calls="[]",
                       malformed=False, taken_content="".join(toks), taken_tool_calls="[]", has_logprobs=True,
                       tokens=toks, token_logprobs=lps[:, 0].tolist(), topk_tokens=topk, topk_logprobs=lps.tolist(),
                       sum_logprob=float(lps[:, 0].sum()), num_tokens=tokens)
            rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=10)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    embedder = default_embedder()
    para, non = similarities(embedder, PARA), similarities(embedder, NON)
    print(f"paraphrase pairs      min {para.min():.3f} median {np.median(para):.3f} max {para.max():.3f}")
    print(f"non-paraphrase pairs  min {non.min():.3f} median {np.median(non):.3f} max {non.max():.3f}")
    for t in np.arange(0.60, 0.951, 0.025):
        merged, split = (para >= t).mean(), (non < t).mean()
        mark = "  <- TEXT_SIMILARITY_THRESHOLD" if abs(t - TEXT_SIMILARITY_THRESHOLD) < 1e-9 else ""
        print(f"threshold {t:.3f}: paraphrases merged {merged:.2f}, non-paraphrases split {split:.2f}, "
              f"balanced accuracy {(merged + split) / 2:.3f}{mark}")
    samples = synthetic_samples(args.decisions, args.k, args.tokens)
    for partials in (False, True):
        fresh = Embedder()
        start = time.perf_counter()
        action_turn_table(samples, fresh, conceptual_partials=partials)
        print(json.dumps({"decisions": args.decisions, "k": args.k, "tokens": args.tokens, "conceptual_partials": partials,
                          "texts_embedded": fresh.misses, "seconds": round(time.perf_counter() - start, 2)}))


if __name__ == "__main__":
    main()
