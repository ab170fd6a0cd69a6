"""Map an LLM's free-text answer onto the skill's action set (the seed's NLP component).

A reply is normalised (the shared "The robot should" frame, hedges such as "I think it
would be wise for the robot to", and trailing reasons removed), split into clauses (strong
connectors always; commas and "and" only when the parts are clearly different actions), and
each clause is compared by cosine similarity with every action's reference responses (and
its action text). A clause is accepted when its best action scores at least ``threshold``
and beats the nearest out-of-set anchor (the skill's ``[mapping] reject`` replies) by
``margin``. A margin between the two best *actions* was tried and rejected: the dev set
showed it refuses correct answers between close actions (wait / wait for cue) without
rejecting more out-of-set replies. One clause that matches no action makes the whole reply
"no match" (a bottom-up candidate), because acting on part of a plan is not what the LLM
asked for. A clause addressed to someone else ("the other robot should ...") matches no
action. A clause that only says what not to do ("do not interrupt") or describes the person
("she is still eating") is no step of the plan when the reply has steps beside it.

The second stage, the skill's lexicon (:class:`Lexicon`, ``[actions.<name>.lexicon]``),
reads the clause's words: its verb ("stop approaching" is a stop), what it waits for
("until the person *looks*" against "until the person *finishes*"), what it must not do.
When the action it names is among those the embeddings shortlist (within ``shortlist`` of
the best), it decides; whether the clause belongs to the skill at all stays the embeddings'
call (its best score against ``lexicon_threshold`` and the anchors). A phrase that names an
action alone but beside a waiting step only says how to wait ("stay put and wait until
...", the lexicon's ``holds``) is no step of its own there.

Every decision boundary is guarded: the best action against the second, the score against
the threshold, the lead over the out-of-set anchors against ``margin``, the lexicon's action
against the shortlist's edge, and a split clause's parts against the whole. A clause that
lies within ``near_tie`` of any of them is refused too, recorded as a near tie: the
embedder's int8-stored weights move these quantities by up to 0.0075 from the full fp32
model, and kernels of different CPUs by about 1e-6. With ``near_tie`` above both (robot.toml
``[mapping] near_tie``, 0.01 by default), a clause the robot acts on is one the fp32 model
would accept with the same action, and no CPU maps it to another action
(models/minilm/CARD.md has the measurements). The lexicon reads text only, so it is the same
on every CPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum, StrEnum
from functools import cached_property
from typing import Literal, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "ActionMapper",
    "ClauseMatch",
    "Cues",
    "Embeds",
    "Lexicon",
    "MappingResult",
    "Reading",
    "Refusal",
    "normalise",
    "phrase_pattern",
    "split_clauses",
]


class Embeds(Protocol):
    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


_HEDGE = (
    r"(?:best|wise|wiser|better|good|a good idea|advisable|appropriate|polite|reasonable|"
    r"important|sensible|preferable|courteous|respectful|safest|safer|ideal|necessary|kind|"
    r"considerate|helpful|prudent|fine|okay)"
)
_MODAL = (
    r"(?:should|could|must|can|will|would|shall|may|might|ought to|has to|have to|had better|"
    r"needs? to|is going to|am going to|is to|is supposed to|'ll)"
)
_ADVERB = (
    r"(?:now|first|then|probably|just|simply|immediately|carefully|gently|politely|quietly|"
    r"calmly|slowly|perhaps|maybe|definitely|still|also|instead|ideally|really|at this point|"
    r"for now|right now)"
)
# the robot as the subject: "the robot", "this humanoid robot", "our robot", "the humanoid"
_SELF = r"(?:(?:the|this|our|your) )?(?:(?:humanoid|service|assistant) )?(?:robot|humanoid)"
# "Answer:", "My recommendation -": a label before the reply, not a clause of it
_LABEL = re.compile(
    r"(?:(?:my|the|our) )?(?:robot|action|answer|response|plan|output|suggestion|recommendation|"
    r"decision|next action|next step|best move|final answer|verdict)\s*(?::|[\u2013\u2014-]+)\s*",
    re.IGNORECASE,
)
_FRAME = re.compile(
    rf"^(?:{_LABEL.pattern}|"
    rf"{_HEDGE} (?:for {_SELF} )?to\s+|(?:best|better)\s+(?=let\b|just\b)|"
    r"(?:step )?(?:\d+[.):]|[-*\u2022])\s+|"
    r"i (?:would |'d )?(?:suggest|recommend|propose|think|believe|feel|reckon|guess|suppose|"
    r"say)(?: that)?"
    rf"(?: {_SELF}(?! {_MODAL}\b))?\s+|"
    r"(?:perhaps|maybe|probably|possibly|ideally|preferably|okay|ok|alright|yes|sure|so|"
    r"well|hmm|honestly|personally)(?:,?\s+|,?$)|(?:no|right)(?:,\s+|,?$)|"
    rf"(?:it|this) (?:is|would be|might be|may be|could be|seems|'s|'d be) {_HEDGE}"
    rf"(?: for {_SELF})? to\s+|"
    rf"(?:it|this) (?:is|would be|might be|'s|'d be) {_HEDGE} if {_SELF} "
    r"(?:were to|would|could|will|can|did)\s+|"
    rf"{_SELF} would do well to\s+|"
    rf"(?:have|get|make|let) {_SELF} (?:to )?(?=\w)|"
    r"(?:in my (?:opinion|view)|from my (?:perspective|point of view)|if you ask me|"
    r"as i see it|in this (?:situation|case|scenario)|given the (?:situation|circumstances|"
    r"context)|for now|at this point|right now|at the moment|in any case)(?:,?\s+|,?$)|"
    r"(?:it|this) (?:is|would be) (?:recommended|suggested|advised|advisable|best|better) "
    rf"(?:that|for) (?:{_SELF} )?(?:to )?|"
    # "the best next step is to", "a better move would be for the robot to", "the most
    # considerate choice is to"
    r"(?:the|a|my) (?:[a-z-]+ ){0,3}(?:thing to do|action|course of action|option|response|"
    r"approach|move|step|behaviou?r|choice|continuation|reaction|pick|bet|plan|idea) "
    r"(?:here |now |for now )?(?:is|would be|will be|here is|seems|'d be) "
    rf"(?:for {_SELF} )?(?:to )?|"
    rf"(?:it|this) (?:makes|would make) (?:the most |more |good )?sense (?:for {_SELF} )?to\s+|"
    r"(?:that said|having said that|all the same|even so|in that case|right|g'day),?\s+|"
    r"(?:my|the) (?:suggestion|recommendation|advice) (?:is|would be) "
    rf"(?:for {_SELF} )?(?:to|that)\s+|"
    rf"{_SELF}'s (?:next |best |first |main |immediate )?(?:step|action|move|task|priority|"
    r"response|job|plan) (?:should be|is|would be|will be|must be) (?:to )?|"
    rf"what (?:{_SELF}|it|you|we) (?:should|needs to|ought to|must) do (?:now |here )?is "
    r"(?:to )?|"
    r"first(?: of all)?,?\s+|(?:second|third|fourth)(?:ly)?,?\s+|next,?\s+|"
    r"now,?\s+|then,?\s+|subsequently,?\s+|"
    rf"{_SELF} {_MODAL}(?:\s+|$)(?:{_ADVERB}\s+)*|"
    rf"{_SELF} (?:is |was |will be |'s )?(?=\w+(?:ing|ed)\b|made\b)|"
    rf"{_SELF} (?!is\b|was\b|has\b|does\b)(?=\w+s\b)|"
    rf"(?:it|you|we|i)(?: {_MODAL}|'ll|'d|'m going to| am going to| are going to)"
    rf"(?:\s+|$)(?:{_ADVERB}\s+)*|"
    r"(?:please|kindly|let's|let us|let me)\s+|"
    r"robot,?\s+(?=[a-z]))+",
    re.IGNORECASE,
)
# a gerund ("interrupting"), not a verb that ends like one ("sing", "bring")
_GERUND_PATTERN = r"(?!(?:s|br|r|st|sw|fl|cl|str|spr|th|k|w|p|d|z|bl)ing\b)\w+ing"
# "she's busy" reads as "she is busy" for the patterns below ("let's" stays as it is)
_CONTRACTION = re.compile(
    r"\b(he|she|it|that|there|who|they|we|you|i)'(s|re|ve|m)\b", re.IGNORECASE
)
_EXPANDED = {"s": "is", "re": "are", "ve": "have", "m": "am"}
# "I wouldn't approach" reads as "I would not approach", so the frame leaves "not approach"
_NOT = re.compile(r"\b(would|should|could|must|need|ought|might|is|are|was|were|has|have)n't\b")
_WONT = re.compile(r"\b(?:won't|can't|cannot)\b", re.IGNORECASE)


# "..., I'd say", "..., mate", "..., yeah": asides at the end of a clause
_TAG = re.compile(
    r",?\s*\b(?:i'd say|i would say|i think|i reckon|i guess|mate|yeah|buddy|pal|robot|"
    r"then only|if you like|why not)\b(?=\s*(?:[,.!?;\u2013\u2014]|$))",
    re.IGNORECASE,
)


def _expand(text: str) -> str:
    text = _CONTRACTION.sub(lambda m: f"{m.group(1)} {_EXPANDED[m.group(2).lower()]}", text)
    text = _NOT.sub(r"\1 not", text.replace("\u2019", "'"))
    text = _WONT.sub(lambda m: "will not" if m.group(0).lower() == "won't" else "can not", text)
    text = _TAG.sub("", text)
    return re.sub(r"\*\*|__", "", text)  # markdown bold


# the robot named inside a clause ("have the robot offer its help", "halt the robot's
# motion") reads as "it": the references name it only as the subject the frame removes
_SELF_INSIDE = re.compile(
    r"\b(?:the|this|our|your) (?:(?:humanoid|service|assistant) )?(?:robot|humanoid)('s)?\b",
    re.IGNORECASE,
)
# whoever or whatever a statement is about: a piece of a longer reply that opens with the
# person ("the man looks distracted; ...", "they are still talking. ...") describes, it is
# not a step
_PERSON_SUBJECT = re.compile(
    r"^(?:the person(?:'s)?|the (?:two|other|whole) \w+|both of them|nobody|no one|everyone|"
    r"the (?:family|couple|group|pair|parent|people))\b(?! (?:should|must|needs? to|has to)\b)",
    re.IGNORECASE,
)
_LEADING_REASON = re.compile(
    r"^(?:(?:since|because|as|given(?: that)?|considering(?: that)?|seeing that|now that|if|"
    r"when|while|instead of|rather than|without)\b[^,]*,(?:\s*which\b[^,]*,)?\s*|"
    r"(?!the (?:robot|humanoid)\b)(?:the person|the \w+|they|he|she|nobody|no one|everyone|"
    rf"it|this|that|there|{_GERUND_PATTERN})\b"
    r".*?,\s*(?:so|therefore|thus|hence)\b(?! that\b)\s*)",
    re.IGNORECASE,
)
_PEOPLE = (
    r"(?:person|man|woman|lady|gentleman|guy|customer|visitor|guest|user|human|individual|"
    r"child|kid|boy|girl|student|shopper|passenger|patient|travell?er|tourist|client|"
    r"stranger|pedestrian|passer-?by|teen(?:ager)?|senior|adult|resident|participant|"
    r"attendee|buyer|diner|reader|caller|newcomer|commuter|bloke|lad|lass|chap|fella|fellow|"
    r"gent|aunty|auntie|uncle)"
)
_PERSON = re.compile(
    r"\b(?:(?<!the )(?<!this )(?<!that )(?<!a )(?<!'s )(?:person|human|lady)(?!'s)\b|"
    r"(?:the|this|that) (?:(?:old|older|elderly|young|younger|little|small|tall|seated|"
    r"sitting|standing|waiting|busy|nearby|lone|new|same) ){0,2}" + _PEOPLE + r"|"
    r"him|her|them|he|she|they)\b",
    re.IGNORECASE,
)
_REASON = re.compile(
    r"(?:(?:^|,?\s+)(?:since|because|so that|as the person|as they|in order to|so as to|"
    r"to avoid|(?<!for the person )(?:to show|to let)|to make sure|such as|for example|e\.g\.|"
    r"to (?:get|draw|attract|catch|grab) (?:\w+ ){0,2}attention|"
    r"before (?:continuing|proceeding|moving on|going on|doing anything|engaging)|"
    r"so (?:they|the person|it|as))\b.*|,\s*(?:without|which|while|as)\b.*)$",
    re.IGNORECASE,
)
_STRONG = re.compile(
    r"\s*(?:;|\.\s+|,?\s*\band then\b|,?\s*\bthen\b|,?\s*\bafter that\b,?|"
    r",?\s*\bafterwards\b,?|,?\s*\bfollowed by\b|,?\s*(?:\band\s+)?\b(?:finally|lastly)\b,?)"
    r"\s*",
    re.IGNORECASE,
)
# what follows "before" ("greet her before leaving") or a dash ("wait - she is busy") is a
# later step if it names an action, else a remark
_SUBORDINATE = re.compile(
    r"\s*,?\s*\bbefore\b(?!\s+(?:doing|the person|they|continuing|proceeding|moving on|"
    r"going on|engaging))\s*|\s[\u2013\u2014-]+\s",
    re.IGNORECASE,
)
_WEAK = re.compile(r"\s*(?:,\s*and\b|,|:|\band\b)\s*", re.IGNORECASE)
_LEADING_BEFORE = re.compile(r"^before\s+([^,]+),\s*(.+)$", re.IGNORECASE)
_QUOTE = re.compile(
    r""""[^"]{2,}?"|“[^”]*”|‘[^’]*’|(?<![A-Za-z])'(?:[^']|'(?=[A-Za-z])){2,}?'(?![A-Za-z])"""
)
# "say: Hello, can I help?": unquoted words after a speech verb and a colon are its phrase
_SPOKEN = re.compile(
    r"\b(?:say|says|saying|ask|asks|asking|tell|tells|speak|speaks|announce|reply|respond)"
    r"\b[^:.!?\"“‘]{0,40}:\s*(?=[^\s\"“‘])",
    re.IGNORECASE,
)
_GERUND = _GERUND_PATTERN
# a sentence that opens like a statement, and one that opens like an order to the robot
_REMARK = re.compile(
    r"^(?:it|this|that|these|those|there|the|a|an|people|everyone|someone|everything|nothing|"
    r"he|she|they|his|"
    rf"her|their|its|my|our|{_GERUND}|reason|because|since|as|so|otherwise|however|"
    r"note|remember)\b",
    re.IGNORECASE,
)
_ORDER = re.compile(rf"^(?:{_SELF}\b|(?:it|you|we|i)(?: {_MODAL}\b|'ll\b))", re.IGNORECASE)
# "(she is on the phone)": an aside, never a step
_ASIDE = re.compile(
    r"\s*\([^()]*\)|\s[\u2013\u2014]\s[^\u2013\u2014.;]{1,40}\s[\u2013\u2014](?=\s)"
)
# "1. Stop. 2. Look at her." and "Step 2: ...": numbers of a list, not clauses
_LIST_MARK = re.compile(
    r"(?:^|(?<=\s))(?:step\s+)?\(?\d{1,2}(?:[.):]|\s[\u2013\u2014-])\s+|(?:^|\s)[\u2022*]\s+|"
    r"(?:^|(?<=[.!?;:]\s))-\s+",
    re.IGNORECASE,
)
_QUOTE_LEAD = re.compile(r"[,:]\s*(?=something\b)")
# a clause that tells what not to do, and one that describes the person: neither is a step
# of the plan when the reply has others ("do not interrupt; wait ...", "..; she is busy")
_NEGATED = re.compile(
    r"^(?:not|never|do not|don't|does not|doesn't|avoid|refrain from|no need to|instead of|"
    r"rather than|"
    # "it might be too much to walk up", "it would be rude to interrupt"
    r"(?:(?:it|this|that) (?:is|would be|might be|may be|could be|seems|feels|will be) |be |"
    rf"{_GERUND_PATTERN} (?:\w+ ){{0,3}}(?:is|would be|might be|may be|could be|seems|feels|"
    r"will be|might feel|could feel|would feel) )"
    r"(?:\w+ )?(?:too \w+|intrusive|rude|abrupt|unnecessary|risky|pushy|startling|awkward|"
    r"premature|impolite|inappropriate|unwise|a bad idea|not (?:a good idea|wise|necessary|"
    r"appropriate|polite)))\b",
    re.IGNORECASE,
)
# "stop approaching": for the lexicon, what the robot must no longer do
_CEASES = re.compile(r"^(?:stop|cease|quit)\s+(?=\w+ing\b)", re.IGNORECASE)
# a clause addressed to someone else ("the other robot should ...", "staff must ...")
_OTHER_AGENT = re.compile(
    r"^(?!the person (?:\w+ )?be\b)(?:(?:someone|somebody|anyone|everyone)(?: else)?"
    r"(?: (?:from|at|in|on|of) (?:the )?[\w'-]+(?: [\w'-]+)?)?|"
    r"(?:the|a|an|another|some|one|other|any) (?:[a-z'-]+ ){0,2}[a-z'-]+) "
    rf"{_MODAL}\b|"
    # "the supervisor greets the visitor": a helper as the subject, whatever the verb
    r"^(?:the|a|an|another|some) (?:[a-z'-]+ ){0,2}(?:staff|supervisor|guard|receptionist|"
    r"colleague|attendant|employee|clerk|volunteer|manager|operator|robot|member|security|"
    r"team|crew|usher|concierge)s?\b(?! (?:is|are|was|were)\b)|"
    # "let the person's friend explain", "let a staff member handle it"
    r"^let (?:the person's |a |an |another |the |some )(?:[\w'-]+ )?(?:friend|staff|colleague|"
    r"receptionist|guard|security|attendant|employee|clerk|companion|member|robot|team|human|"
    r"someone|somebody|operator|volunteer|worker|guide)s?\b",
    re.IGNORECASE,
)
_DESCRIBES = re.compile(
    r"^(?:(?:reason|reasoning|why|because)\b|"
    r"(?:re-?assess|re-?evaluate|assess|evaluate|monitor|see what happens|observe the situation|"
    r"see|decide|take it from there|go from there|"
    r"(?:proceed|act|respond|adapt|adjust) accordingly)\b|"
    r"(?:the person(?:'s \w+)?|this|that|it|there|doing so|otherwise|this way|that way|"
    r"the (?!robot\b|humanoid\b)\w+)"
    r"(?:\s+(?!and\b|then\b)[\w']+){0,3}?\s+"
    r"(?:is|are|was|were|has|have|had|seems?|appears?|looks? (?:busy|lost|like)|might|may|"
    r"will|would|can|could|does|did|isn't|aren't|won't|wants?|needs?|helps?|makes?|shows?|"
    r"gives?|allows?|lets?|keeps?|ensures?|avoids?|prevents?)\b|"
    r"(?:most )?(?:people|humans|everyone|nobody|no one)\s+\w+|"
    # a statement given as a reason: "interrupting would be rude", "a quick look shows ..."
    rf"(?:a|an|these|those|such|people|someone|{_GERUND})\b[\w' -]{{0,40}}? "
    r"(?:would|might|could|may|will|can|shows?|helps?|makes?|gives?|allows?|lets?|avoids?|"
    r"ensures?|prevents?|signals?|indicates?)\b)",
    re.IGNORECASE,
)
OUT_OF_SET = "(out of set)"


class Refusal(StrEnum):
    """Why a clause maps to no action (recorded as the clause's ``refused``)."""

    BELOW_THRESHOLD = "below threshold"
    OUT_OF_SET = "nearer an out-of-set reply"
    NEAR_TIE = "near tie: two actions"
    NEAR_THRESHOLD = "near tie: threshold"
    NEAR_MARGIN = "near tie: out-of-set margin"
    NEAR_SHORTLIST = "near tie: shortlist"
    NEAR_SPLIT = "near tie: one step or several"
    CONTEXT = "not a step: a prohibition, description or reason beside other steps"
    OTHER_AGENT = "addressed to someone else"


def normalise(text: str) -> str:
    """Lower-case, without the shared frame, a trailing reason or closing punctuation."""
    text = _expand(" ".join(text.strip().split()))
    for _ in range(2):  # "I think since she is busy, it should ..."
        text = _FRAME.sub("", _LEADING_REASON.sub("", text))
    text = _SELF_INSIDE.sub(lambda m: "its" if m.group(1) else "it", text)
    text = _PERSON.sub("the person", text)
    text = _REASON.sub("", text)
    text = _QUOTE.sub("something", text)
    text = _QUOTE_LEAD.sub(" ", text)
    return " ".join(text.strip(" .!,;:").lower().split())


def _without_lead(text: str) -> str:
    """``text`` without the frame and the leading reason :func:`normalise` removes, so the
    reason's commas do not split the step ("Waiting seems pointless, so greet her")."""
    text = " ".join(text.split())
    for _ in range(2):
        text = _FRAME.sub("", _LEADING_REASON.sub("", text))
    return text


def split_clauses(reply: str) -> list[list[str]]:
    """Strong segments in order, each with its weak parts: ``[[part, ...], ...]``."""
    return [parts for parts, _ in _segments(reply)]


class Remark(IntEnum):
    """What a segment of a longer reply reads as, besides a possible step."""

    NO = 0
    #: after "before" or a dash: a later step if it names an action ("... before greeting her")
    LATER = 1
    #: a sentence that opens like a statement ("It is important to ...", "Everything suggests
    #: ..."), not an order: a step only when no sentence gives one
    STATEMENT = 2
    #: a statement about the person ("She is reading; ...", "The man just hung up. ...")
    DESCRIPTION = 3


def _segments(reply: str) -> list[tuple[list[str], Remark]]:
    """:func:`split_clauses`, each segment with what kind of remark it is in a reply of
    several sentences or pieces."""
    quotes: list[str] = []

    def hide(match: re.Match[str]) -> str:
        quotes.append(match.group(0))
        return f"QUOTE{len(quotes) - 1}Q"

    text = _expand(" ".join(_ASIDE.sub(" ", reply).split()))
    text = re.sub(rf"^{_LABEL.pattern}", "", text, flags=re.IGNORECASE)
    spoken = _SPOKEN.search(text)
    if spoken is not None:
        text = f'{text[: spoken.end()]}"{text[spoken.end() :].replace(chr(34), "")}"'
    hidden = _QUOTE.sub(hide, text)
    # each list item is a sentence of its own: "1) stop 2) look at her", "- Halt. - Then ..."
    hidden = _LIST_MARK.sub(". ", hidden).strip(". ")

    def show(text: str) -> str:
        return re.sub(r"QUOTE(\d+)Q", lambda m: quotes[int(m.group(1))], text)

    segments: list[tuple[str, Remark]] = []
    sentences = re.split(r"[.!?]\s+", hidden.strip().rstrip(".!"))
    pieces = [re.split(r";\s+|\s[\u2013\u2014-]+\s", sentence.strip()) for sentence in sentences]
    several = sum(len(p) for p in pieces) > 1
    for sentence in sentences:
        sentence = sentence.strip()
        statement = (
            len(sentences) > 1 and bool(_REMARK.match(sentence)) and not _ORDER.match(sentence)
        )
        for piece in re.split(r";\s+", sentence):
            before = _LEADING_BEFORE.match(piece.strip())
            ordered = [before.group(2), before.group(1)] if before else [piece]
            for part in ordered:
                for later, clause in enumerate(_SUBORDINATE.split(part)):
                    about_person = several and _PERSON_SUBJECT.match(normalise(show(clause)))
                    remark = (
                        Remark.DESCRIPTION
                        if about_person
                        else Remark.STATEMENT
                        if statement
                        else Remark.LATER
                        if later > 0
                        else Remark.NO
                    )
                    segments += [(c, remark) for c in _STRONG.split(clause)]
    out = []
    for segment, remark in segments:
        whole = normalise(show(segment))
        if not whole:
            continue
        parts = [normalise(show(p)) for p in _WEAK.split(_without_lead(segment))]
        out.append(([whole, *[p for p in parts if p and p != whole]], remark))
    return out


_CONDITION = re.compile(r"\b(?:until|till|unless|for|to be|if|whether|while|as long as)\b")


def phrase_pattern(phrase: str) -> str:
    """A lexicon phrase as a regular expression: each word with its regular inflections
    (stop: stops, stopped, stopping; notice: notices, noticed, noticing), ``...`` for up to
    three other words ("let ... finish")."""
    space = r"\s+"
    words = []
    for word in phrase.split():
        if word == "...":
            words.append(r"(?:\S+\s+){0,3}?")
            continue
        stem = re.escape(word)
        forms = rf"{stem}(?:s|es|d|ed|ing|[bdgklmnprt](?:ed|ing))?"
        if word.endswith("e") and len(word) > 2:
            forms = rf"(?:{forms}|{re.escape(word[:-1])}ing)"
        words.append(forms + space)
    body = "".join(words).removesuffix(space)
    return rf"(?<![\w']){body}(?![\w'])"


@dataclass(frozen=True)
class Cues:
    """One action's phrases for the rule stage (a skill's ``[actions.<name>.lexicon]``).

    ``verbs`` name what the robot does ("walk up", "meet ... gaze"); ``until`` what it waits
    for ("until the person *finishes*"); ``negated`` what it is told not to do when that
    means this action ("do not *move* any closer"); ``holds`` name the action alone but,
    beside a waiting step, only say how the robot waits ("*stay put* and wait until ...").
    An action with ``until`` phrases is a waiting action.
    """

    verbs: Sequence[str] = ()
    until: Sequence[str] = ()
    negated: Sequence[str] = ()
    holds: Sequence[str] = ()


Kind = Literal["verbs", "until", "negated", "holds"]


class Reading(NamedTuple):
    """The action a clause's words name, and which of its phrases named it."""

    action: str
    kind: Kind


class Lexicon:
    """The rule stage's reading of a clause: the action its words name, or None.

    The clause's verb names an action: the earliest phrase of any action's ``verbs`` or
    ``holds`` (the longest at one position), or after "do not", "instead of" and the like,
    the earliest of ``negated``. When the clause has a condition ("until ...", "for the
    person to ...", "if ...") and its verb is not an active one (none, a waiting action's, a
    hold, a negated one), the condition names the action instead, by the earliest phrase of
    any action's ``until`` in it ("until the person finishes looking at the map" is a wait).
    Two actions named at the same place leave no reading.
    """

    def __init__(self, cues: Mapping[str, Cues]) -> None:
        self._cues = dict(cues)
        self.waiting = frozenset(name for name, c in cues.items() if c.until)

    # compiled at the first reading, not when the skill loads: ``onboard check`` and a
    # mapper that answers from exact names never pay for them
    @cached_property
    def _verbs(self) -> list[tuple[Reading, re.Pattern[str]]]:
        return self._compiled("verbs", "holds")

    @cached_property
    def _until(self) -> list[tuple[Reading, re.Pattern[str]]]:
        return self._compiled("until")

    @cached_property
    def _negated(self) -> list[tuple[Reading, re.Pattern[str]]]:
        return self._compiled("negated")

    def _compiled(self, *fields: Kind) -> list[tuple[Reading, re.Pattern[str]]]:
        # one pattern per action and kind, its longest phrases first
        found = []
        for kind in fields:
            for name, c in self._cues.items():
                phrases = sorted(getattr(c, kind), key=lambda p: (-len(p), p))
                if phrases:
                    either = "|".join(phrase_pattern(p) for p in phrases)
                    found.append((Reading(name, kind), re.compile(either)))
        return found

    def reading(self, clause: str) -> Reading | None:
        condition = _CONDITION.search(clause)
        # a verb starts before the condition, though it may run into it ("look for")
        limit = len(clause) if condition is None else condition.start()
        negated = _NEGATED.match(clause) or _CEASES.match(clause)
        if negated is not None:
            doing = self._earliest(self._negated, clause, negated.end(), limit)
        else:
            doing = self._earliest(self._verbs, clause, 0, limit)
        if condition is None:
            return doing
        # "wait / stay put / do not approach until ...": the condition names the action;
        # "greet them if ...", "approach until ...": the verb does
        if doing is not None and doing.kind == "verbs" and doing.action not in self.waiting:
            return doing
        named = self._earliest(self._until, clause, condition.end(), len(clause))
        return doing if named is None else named

    @staticmethod
    def _earliest(
        patterns: list[tuple[Reading, re.Pattern[str]]], text: str, start: int, limit: int
    ) -> Reading | None:
        found: list[tuple[int, int, Reading]] = []
        for reading, pattern in patterns:
            match = pattern.search(text, start)
            if match is not None and match.start() < limit:
                found.append((match.start(), -len(match.group(0)), reading))
        if not found:
            return None
        found.sort(key=lambda f: f[:2])
        first = found[0]
        rivals = {r for start, length, r in found if (start, length) == first[:2]}
        return first[2] if len(rivals) == 1 else None


def _role(match: ClauseMatch, remark: Remark) -> int:
    """0 for a step of the plan, 1 for a step stated as a remark, 2 for a prohibition, 3 for
    a description or a reason (a remark that names no action is one)."""
    if _DESCRIBES.match(match.clause) or remark is Remark.DESCRIPTION:
        return 3
    if remark in (Remark.STATEMENT, Remark.LATER) and match.action is None:
        return 3
    if _NEGATED.match(match.clause):
        return 2
    return 1 if remark is Remark.STATEMENT else 0


@dataclass(frozen=True)
class ClauseMatch:
    clause: str
    action: str | None
    score: float
    runner_up: str | None
    runner_up_score: float
    out_of_set_score: float = -1.0
    refused: Refusal | None = None
    reading: Reading | None = None

    def to_record(self) -> dict[str, object]:
        return {
            "clause": self.clause,
            "action": self.action,
            "score": round(self.score, 4),
            "runner_up": self.runner_up,
            "runner_up_score": round(self.runner_up_score, 4),
            "out_of_set_score": round(self.out_of_set_score, 4),
            "refused": None if self.refused is None else str(self.refused),
            "lexicon": None if self.reading is None else self.reading.action,
        }


@dataclass(frozen=True)
class MappingResult:
    reply: str
    actions: list[str]
    clauses: list[ClauseMatch] = field(default_factory=list)

    @property
    def matched(self) -> bool:
        return bool(self.actions)

    def to_record(self) -> dict[str, object]:
        return {
            "reply": self.reply,
            "actions": self.actions,
            "clauses": [c.to_record() for c in self.clauses],
        }


class ActionMapper:
    """Nearest-action search over reference responses, with threshold, margin and near-tie band."""

    #: a clause splits at a comma or "and" when its parts score at most this below it
    SPLIT = 0.12

    def __init__(
        self,
        embedder: Embeds,
        references: Mapping[str, Sequence[str]],
        threshold: float = 0.5,
        margin: float = 0.04,
        reject: Sequence[str] = (),
        ambiguity: float = 0.9,
        near_tie: float = 0.0,
        lexicon: Lexicon | None = None,
        shortlist: float = 0.0,
        lexicon_threshold: float | None = None,
        top_k: int = 1,
        embed_references: Callable[[Sequence[str]], npt.NDArray[np.float32]] | None = None,
    ) -> None:
        """``embed_references``: how the reference texts are embedded (default: ``embedder``;
        :meth:`Embedder.embed_references` keeps them on disk between runs)."""
        self.embedder = embedder
        self.threshold = threshold
        self.margin = margin
        self.ambiguity = ambiguity
        self.near_tie = near_tie
        self.lexicon = lexicon
        self.shortlist = shortlist
        self.lexicon_threshold = threshold if lexicon_threshold is None else lexicon_threshold
        self.top_k = top_k
        self._names = list(references)
        references = {**references, OUT_OF_SET: list(reject)}
        self._lookup = {" ".join(n.lower().split()): n for n in self._names}
        self._owner: list[int] = []
        texts: list[str] = []
        for index, name in enumerate([*self._names, OUT_OF_SET]):
            for ref in references[name]:
                texts.append(normalise(ref))
                self._owner.append(index)
        self._refs = (embed_references or embedder.embed)(texts)
        self._ref_texts = texts

    def map(self, reply: str) -> MappingResult:
        """The ordered actions ``reply`` asks for, or none ("no match")."""
        exact = self._lookup.get(" ".join(normalise(reply).split()))
        if exact is not None:
            return MappingResult(reply, [exact], [ClauseMatch(reply, exact, 1.0, None, 0.0)])
        segments = _segments(reply)
        flat = [text for segment, _ in segments for text in segment]
        if not flat:
            return MappingResult(reply, [])
        matches = dict(zip(flat, self._score(flat), strict=True))
        chosen: list[ClauseMatch] = []
        roles: list[int] = []
        for (whole, *parts), remark in segments:
            found = self._choose(matches[whole], [matches[p] for p in parts])
            chosen += found
            roles += [_role(m, remark) for m in found]
        # the plan is its steps; without steps those stated as remarks, then its
        # prohibitions; descriptions and reasons only when the reply has nothing else
        kept = min(roles)
        chosen = [
            m if role == kept else replace(m, action=None, refused=Refusal.CONTEXT)
            for m, role in zip(chosen, roles, strict=True)
        ]
        if any(m.action is None and m.refused is not Refusal.CONTEXT for m in chosen):
            return MappingResult(reply, [], chosen)
        actions: list[str] = []
        for match in chosen:
            if match.action is not None and (not actions or actions[-1] != match.action):
                actions.append(match.action)
        return MappingResult(reply, actions, chosen)

    def _choose(self, whole: ClauseMatch, parts: list[ClauseMatch]) -> list[ClauseMatch]:
        """Split at commas/"and" only when every part is clearly an action of its own."""
        if len(parts) < 2:
            return [whole]
        if any(p.action is None for p in parts):
            return [whole]
        if self.lexicon is not None:
            waiting = self.lexicon.waiting
            steps = [
                p
                for p in parts
                if p.reading is None
                or p.reading.kind != "holds"
                or not any(q.action in waiting for q in parts if q is not p)
            ]
            if len(steps) == 1:
                return steps
            if len(steps) < len(parts):
                return self._choose(whole, steps)
            if whole.action is not None and all(p.action in waiting for p in parts):
                return [whole]  # "wait and see if the person looks over": one wait
        distinct = {p.action for p in parts}
        if len(distinct) > 1 and all(
            p.reading is not None and p.reading.action == p.action for p in parts
        ):
            return parts
        if whole.action is None:
            return parts
        if len(distinct) == 1:
            return [whole]
        # the parts' weakest score against the whole's, less SPLIT: a boundary like the others
        lead = min(p.score for p in parts) - (whole.score - self.SPLIT)
        if abs(lead) < self.near_tie:
            return [replace(whole, action=None, refused=Refusal.NEAR_SPLIT)]
        return parts if lead >= 0 else [whole]

    def scores(self, clauses: Sequence[str]) -> npt.NDArray[np.float32]:
        """Each clause's score per action (the mean of its ``top_k`` best cosines with the
        action's references; the best one by default), in skill order, then its best cosine
        with the reject anchors.

        ``clauses`` are normalised text (as :func:`split_clauses` returns them); the
        result has shape ``(len(clauses), len(actions) + 1)``.
        """
        vectors = self.embedder.embed(list(clauses))
        sims = vectors @ self._refs.T
        per_action = np.full((len(clauses), len(self._names) + 1), -1.0, dtype=np.float32)
        owners = np.asarray(self._owner)
        for index in range(len(self._names) + 1):
            columns = sims[:, owners == index]
            if columns.shape[1] == 0:
                continue
            k = 1 if index == len(self._names) else min(self.top_k, columns.shape[1])
            top = -np.sort(-columns, axis=1)[:, :k]
            per_action[:, index] = top.mean(axis=1, dtype=np.float32)
        return per_action

    def _score(self, clauses: Sequence[str]) -> list[ClauseMatch]:
        per_action = self.scores(clauses)
        out = []
        for row, clause in enumerate(clauses):
            reading = None if self.lexicon is None else self.lexicon.reading(clause)
            exact = self._lookup.get(clause)
            if exact is not None:
                out.append(ClauseMatch(clause, exact, 1.0, None, 0.0, reading=reading))
                continue
            in_set = per_action[row, :-1]
            # stable: equal scores keep skill order, whatever order numpy's sort visits them
            order = np.argsort(-in_set, kind="stable")
            best, second = int(order[0]), int(order[1])
            score, runner = float(in_set[best]), float(in_set[second])
            rejected = float(per_action[row, -1])
            chosen, refused = best, self._refusal(score, runner, rejected)
            if _OTHER_AGENT.match(clause):
                refused = Refusal.OTHER_AGENT
            elif reading is not None:
                chosen, refused = self._second_stage(in_set, best, reading, rejected, refused)
            if chosen != best:
                score, runner, second = float(in_set[chosen]), float(in_set[best]), best
            action = self._names[chosen] if refused is None else None
            out.append(
                ClauseMatch(
                    clause, action, score, self._names[second], runner, rejected, refused, reading
                )
            )
        return out

    def _second_stage(
        self,
        in_set: npt.NDArray[np.float32],
        best: int,
        reading: Reading,
        rejected: float,
        refused: Refusal | None,
    ) -> tuple[int, Refusal | None]:
        """The lexicon's action when the embeddings shortlist it, else the plain decision.

        The embeddings cannot read negation ("do not come closer" is nearest "come closer"),
        so what a clause forbids is read from its words alone, whatever their ranking.
        """
        band = self.near_tie
        named = self._names.index(reading.action)
        behind = float(in_set[best] - in_set[named])
        if reading.kind != "negated":
            if behind > self.shortlist + band:
                return best, refused
            if behind > self.shortlist - band and named != best:
                return named, Refusal.NEAR_SHORTLIST
        # whether the clause is about this skill at all is the embeddings' call, whichever
        # action the lexicon names
        score = float(in_set[best])
        if score < self.lexicon_threshold:
            return named, Refusal.BELOW_THRESHOLD
        if score - rejected < self.margin:
            return named, Refusal.OUT_OF_SET
        if score < self.lexicon_threshold + band:
            return named, Refusal.NEAR_THRESHOLD
        if score - rejected < self.margin + band:
            return named, Refusal.NEAR_MARGIN
        return named, None

    def _refusal(self, score: float, runner: float, rejected: float) -> Refusal | None:
        """None to accept the best action, else why not (the plain rule first)."""
        band = self.near_tie
        if score < self.threshold:
            return Refusal.BELOW_THRESHOLD
        if score - rejected < self.margin:
            return Refusal.OUT_OF_SET
        if score - runner < band:
            return Refusal.NEAR_TIE
        if score < self.threshold + band:
            return Refusal.NEAR_THRESHOLD
        if score - rejected < self.margin + band:
            return Refusal.NEAR_MARGIN
        return None

    def ambiguities(self) -> list[tuple[str, str, str, str, float]]:
        """Pairs of references of different actions closer than the threshold allows."""
        sims = self._refs @ self._refs.T
        owners = np.asarray(self._owner)
        # pairs i < j of different actions, found by numpy rather than a loop over every pair
        close = np.triu(sims >= self.ambiguity, k=1) & (owners[:, None] != owners[None, :])
        names = [*self._names, OUT_OF_SET]
        return [
            (
                names[owners[i]],
                names[owners[j]],
                self._ref_texts[i],
                self._ref_texts[j],
                float(sims[i, j]),
            )
            for i, j in zip(*np.nonzero(close), strict=True)
        ]
