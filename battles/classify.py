"""Task or conversation, and a task's category. Transparent rules, no model. Pure.

A conversation gets a reply and starts nothing; a task starts a battle and gets one of
CATEGORIES, the board it counts on. The rules work on a folded text (lower case, accents
dropped, full-width forms made plain: "Öffne", "offne" and "ＯＦＦＮＥ" read alike), in
English, German, French, Spanish, Portuguese, Italian, Dutch, Polish, Japanese and
Chinese. Latin-script words match whole words (an entry ending in "*" matches a word's
start, one starting with "*" its end); Japanese and Chinese entries match anywhere.

Conversation, in order:
1. ``small_talk``: once set phrases are taken out (questions about the arena or the
   assistant, such as "who are you", "wie funktioniert das", "你是谁"; chit-chat such as
   "tell me a joke", "il fait beau"), nothing is left but greeting, thanks, farewell,
   acknowledgement or filler words. ``about_the_arena`` when a question about the arena
   was among what was taken out.
2. ``small_talk`` too: a short message that opens with thanks or an apology ("thanks for
   the help with the file", "merci pour ton aide") and has no question and no task
   signal (an instruction verb, an address, a file name, a sum).
Everything else is a task: an instruction need not start with a verb ("the README of
… — summarise it"), and agents may answer factual questions by doing the work. So a
word the rules do not know ("x", "compare") is a task, never small talk.

Category of a task, first match wins:
1. ``browsing`` with a start URL, or a web signal: an address (https://…, www.…, a
   domain), a web word (site, page, link, form, browser, download, online, internet,
   wikipedia, log in, click, …).
2. ``files_and_data``: files, folders, spreadsheets, CSV/JSON, a file name with an
   extension, code, scripts, the shell, sums, averages, columns, a calculation
   ("6*7") or a list of numbers.
3. ``browsing``: a weaker web signal (search, look up, book, buy, tickets, flights, news,
   prices, opening hours) with no file signal.
4. ``general``: every other task (writing, translating, explaining, questions).
The labelled set in tests/battles/classifier_phrases.tsv measures all of it
(docs/classifier.md has the figures).
"""

import re
import unicodedata
from dataclasses import dataclass

BROWSING, FILES_AND_DATA, GENERAL = "browsing", "files_and_data", "general"
CATEGORIES = (BROWSING, FILES_AND_DATA, GENERAL)
# Repo tasks (docs/coding.md) are "coding" by admission, never by these rules: their
# battles form a board of their own beside the classifier's three.
CODING = "coding"
BOARD_CATEGORIES = (*CATEGORIES, CODING)
CATEGORY_LABELS = {
    BROWSING: "Browsing",
    FILES_AND_DATA: "Files and data",
    GENERAL: "General",
    CODING: "Coding",
}

CONVERSATION_REPLY = (
    "Hello! This reads as conversation rather than a task, so no agents were started. "
    "Describe something for two agents to do on a computer, for example: "
    '"Create a file named notes.txt containing hello arena" or '
    '"Open https://example.com and report the page title".'
)


def fold(text: str) -> str:
    """Lower case, compatibility forms made plain (full-width letters, ligatures), Latin
    accents dropped (Japanese voicing marks kept), curly apostrophes straightened,
    ł → l and ß → ss (casefold)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(c for c in unicodedata.normalize("NFD", text) if not "\u0300" <= c <= "\u036f")
    return unicodedata.normalize("NFC", text).replace("ł", "l").replace("’", "'")


def _is_cjk(entry: str) -> bool:
    return any(
        "\u3040" <= c <= "\u30ff" or "\u3400" <= c <= "\u9fff" or "\uff66" <= c <= "\uff9f"
        for c in entry
    )


@dataclass(frozen=True)
class Lexicon:
    """Words: ``exact`` whole words, ``prefixes`` ("word*"), ``suffixes`` ("*word"),
    ``infixes`` ("*word*") and ``cjk`` substrings."""

    exact: frozenset[str]
    prefixes: tuple[str, ...]
    suffixes: tuple[str, ...]
    infixes: tuple[str, ...]
    cjk: tuple[str, ...]

    @classmethod
    def of(cls, words: str) -> "Lexicon":
        exact, prefixes, suffixes, infixes, cjk = set(), [], [], [], []
        for entry in words.split():
            if _is_cjk(entry):
                cjk.append(entry)
            elif entry.startswith("*") and entry.endswith("*"):
                infixes.append(entry[1:-1])
            elif entry.endswith("*"):
                prefixes.append(entry[:-1])
            elif entry.startswith("*"):
                suffixes.append(entry[1:])
            else:
                exact.add(entry)
        # Longest first, so that removing small-talk substrings takes the whole phrase.
        cjk.sort(key=len, reverse=True)
        return cls(frozenset(exact), tuple(prefixes), tuple(suffixes), tuple(infixes), tuple(cjk))

    def has_word(self, word: str) -> bool:
        return (
            word in self.exact
            or word.startswith(self.prefixes)
            or word.endswith(self.suffixes)
            or any(part in word for part in self.infixes)
        )

    def found_in(self, words: list[str], cjk_runs: list[str]) -> bool:
        return any(self.has_word(w) for w in words) or any(
            entry in run for run in cjk_runs for entry in self.cjk
        )


LATIN_WORD = re.compile(r"[^\W\d_]+|\d+")
CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uff66-\uff9f]+")


def _words(folded: str) -> tuple[list[str], list[str]]:
    """Latin-script words and numbers, and runs of Japanese or Chinese characters."""
    runs = CJK_RUN.findall(folded)
    latin = [w for w in LATIN_WORD.findall(CJK_RUN.sub(" ", folded))]
    return latin, runs


# Greeting, thanks, farewell, acknowledgement and filler words (folded). Nothing here may
# carry a task on its own: a message made only of these is conversation.
SMALL_TALK = Lexicon.of(
    # English
    "hi hii hello helo hey heya hiya yo howdy greetings thanks thank thanx thx ty tysm cheers "
    "bye byebye goodbye cya good morning afternoon evening night day ok okay k kk cool nice "
    "great lol lmao haha hahaha hehe hmm hm test testing there all everyone everybody folks "
    "guys so much very a lot please mate buddy friend friends dear yes yeah yep yup no nope "
    "sure fine alright see you later soon again welcome wow awesome oops sorry ah oh "
    "and to the u ur many happy monday tuesday wednesday thursday friday saturday sunday "
    "weekend week just saying back "
    # German
    "hallo moin servus gruss grussgott gruezi tag morgen abend nacht guten gute schonen "
    "danke dankeschon schon vielen dank merci tschuss tschau ciao bis spater bald alles klar "
    "super toll ja nein zusammen leute euch ihr dir schonen "
    # French
    "bonjour salut coucou bonsoir beaucoup au revoir plus tard bientot bonne journee soiree "
    "nuit d accord genial oui non tous tout le monde ca bien "
    # Spanish
    "hola buenos buenas dias tardes noches gracias muchas adios hasta luego pronto vale si "
    "todos chao chau saludos muy mil "
    # Portuguese
    "ola oi bom boa dia tarde noite obrigado obrigada muito tchau ate logo valeu beleza "
    "legal sim nao pessoal obrigad* falou e "
    # Italian
    "buongiorno buonasera buonanotte salve grazie mille arrivederci dopo presto va bene "
    "perfetto tutti buona buon giornata serata gentilissim* "
    # Dutch
    "hoi goedemorgen goedemiddag goedenavond je wel bedankt doei tot straks ziens "
    "welterusten nee allemaal top "
    # Polish
    "czesc dzien dobry wieczor dziekuje bardzo dzieki do widzenia na razie dobranoc tak nie "
    "witam hej hejka siema wielkie "
    # Japanese
    "こんにちは おはよう ございます こんばんは ありがとう どうも さようなら おやすみ なさい "
    "よろしく お願いします はい いいえ みなさん 皆さん やあ また じゃあ "
    # Chinese
    "你好 您好 早上好 晚上好 下午好 谢谢 多谢 感谢 再见 拜拜 晚安 哈哈 好的 大家好"
)
# Particles that may stay behind in a Japanese or Chinese greeting ("ね", "啊").
CJK_FILLER = set("ねよかなさんのです啊呀呢吧们嗯")

# Questions about the arena or the assistant (folded regular expressions; Latin ones
# match at word boundaries).
META = [
    # English
    r"who are you",
    r"what are you",
    r"what (exactly |else )?can you do",
    r"what do you do",
    r"what is (this|that)( thing)?( here)?",
    r"what'?s (this|that)( thing)?( here)?",
    r"how does (this|it|the arena|this site|this arena|agent arena) work",
    r"how (do|can) (i|we|you) (submit|use|judge|vote|enter|start)"
    r"( (this|a task|tasks|the arena|here))?",
    r"how are you( doing)?( today)?",
    r"how r u",
    r"(are you|is this|is it) (a |an )?(bot|robot|human|real|there|ai|person)",
    r"what is (this( site| place| page| arena)?|agent arena|the arena|an arena)( about)?",
    r"who (made|built|created|programmed|wrote) you",
    r"how are (the )?agents (rated|ranked|judged|scored|chosen|picked)",
    # German
    r"wer bist du",
    r"was bist du",
    r"was kannst du( alles)?( tun| machen)?",
    r"wie funktioniert (das|dies|es|das hier)( hier)?",
    r"wie geht'?s( dir)?",
    r"wie geht es dir",
    r"bist du ein (bot|roboter|mensch)",
    r"was ist (das|dies)( hier)?",
    r"was ist (diese|die) (seite|arena)",
    # French
    r"qui es[- ]tu",
    r"qui etes[- ]vous",
    r"qu'est[- ]ce que tu (sais|peux) faire",
    r"que (sais|peux)[- ]tu faire",
    r"comment (ca|cela) (marche|fonctionne)",
    r"comment vas[- ]tu",
    r"ca va",
    r"(tu es|es[- ]tu) un (robot|bot)",
    r"(tu sers|ca sert) a quoi",
    r"c'est quoi( ce site| cette arena| ca)?",
    r"qu'est[- ]ce que c'est( que ce site| que cette arena)?",
    # Spanish
    r"quien eres",
    r"que puedes hacer",
    r"como estas",
    r"como funciona( esto| isso| isto| la arena| el sitio| este sitio| a arena| o site)?",
    r"que es esto",
    r"que es (este sitio|la arena)",
    r"(eres|tu eres) un (bot|robot)",
    # Portuguese
    r"quem (e|es) (voce|tu)",
    r"o que (voce|tu) (sabe|pode|consegue) fazer",
    r"tudo bem",
    r"como vai( voce)?",
    r"o que e (isso|isto)( aqui)?",
    r"(voce e|es) um (robo|bot)",
    # Italian
    r"chi sei( tu)?",
    r"cosa (sai|puoi) fare",
    r"come funziona( questo)?",
    r"come stai",
    r"sei un (bot|robot)",
    r"cos'? ?e (questo|questa)( sito| arena)?",
    # Dutch
    r"wie ben (jij|je)",
    r"wat kun (je|jij)( doen)?",
    r"hoe werkt (dit|het)",
    r"hoe gaat het( met je)?",
    r"ben je een (bot|robot)",
    r"wat is (dit|dat)( hier)?",
    # Polish
    r"kim jestes",
    r"co potrafisz( zrobic)?",
    r"co umiesz",
    r"jak to dziala",
    r"jak sie masz",
    r"czy jestes (botem|robotem)",
    r"co to (jest|za strona)",
    # Japanese
    r"あなたは(誰|だれ)(ですか)?",
    r"(誰|だれ)ですか",
    r"何ができますか",
    r"何ができるの",
    r"(これは)?どういう仕組み(ですか)?",
    r"お?元気ですか",
    r"(これは|ここは)?何ですか",
    # Chinese
    r"你是谁",
    r"你(能|会)做什么",
    r"(这个)?(是)?怎么(运作|用|工作)的?",
    r"你好吗",
    r"(这|这个)是什么",
]
CHITCHAT = [
    # English
    r"tell me a joke",
    r"(i'?m|i am) (bored|tired|happy|sad|back|here)",
    r"nice weather( today)?",
    r"(isn'?t it|is it not)",
    r"how'?s (your|the) day( going)?",
    r"how (is|was|were) (your|the) (day|weekend|week|morning|evening|holidays?|trip)( going)?",
    r"(happy|good) (monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend)",
    r"(you'?re|you are) (awesome|great|amazing|the best|funny|smart|cool|nice)",
    r"good job",
    r"well done",
    r"nice to meet you",
    r"never ?mind",
    r"wrong (window|tab|chat)",
    r"have a (nice|good|great) (day|weekend|evening|one)",
    r"what'?s up",
    r"i love you",
    r"just (testing|checking)",
    # German
    r"schones wetter( heute)?",
    r"oder",
    r"wie war dein tag",
    r"erzahl mir einen witz",
    r"mir ist langweilig",
    r"gut gemacht",
    r"(schonen|guten) (abend|tag|morgen) noch",
    # French
    r"il fait beau( aujourd'hui)?",
    r"raconte[- ]moi une blague",
    r"je m'ennuie",
    r"bien joue",
    # Spanish
    r"que tal( el dia| tu dia)?",
    r"hace buen tiempo( hoy)?",
    r"cuentame un chiste",
    r"estoy aburrid[oa]",
    r"buen trabajo",
    r"nos vemos",
    r"me equivoque",
    # Portuguese
    r"conta uma piada",
    r"estou entediad[oa]",
    r"bom trabalho",
    r"e ai",
    r"tudo certo",
    r"ate mais",
    # Italian
    r"fa bel tempo( oggi)?",
    r"raccontami una barzelletta",
    r"tutto bene",
    r"ottimo lavoro",
    # Dutch
    r"mooi weer( vandaag)?",
    r"vertel een mop",
    r"goed gedaan",
    # Polish
    r"ladna pogoda( dzis)?",
    r"opowiedz dowcip",
    r"dobra robota",
]


@dataclass(frozen=True)
class Phrases:
    """Set phrases as two expressions: the Latin ones as one alternation behind a single
    word-boundary test (a position inside a word fails at once, not once per phrase),
    the Japanese and Chinese ones apart (tried only on a text that has such characters).
    Longest phrase first: of two that start at the same place the longer is tried first
    ("how are you doing" before "how are you")."""

    latin: re.Pattern
    cjk: re.Pattern | None

    @classmethod
    def of(cls, patterns: list[str]) -> "Phrases":
        patterns = sorted(patterns, key=len, reverse=True)
        latin = "|".join(f"(?:{p})" for p in patterns if not _is_cjk(p))
        cjk = "|".join(f"(?:{p})" for p in patterns if _is_cjk(p))
        return cls(re.compile(rf"(?<![\w'])(?:{latin})(?![\w'])"), re.compile(cjk) if cjk else None)

    def sub(self, replacement: str, folded: str) -> str:
        """``folded`` with every phrase replaced."""
        text = self.latin.sub(replacement, folded)
        if self.cjk is not None and CJK_RUN.search(text):
            text = self.cjk.sub(replacement, text)
        return text


META_RE = Phrases.of(META)
CHITCHAT_RE = Phrases.of(CHITCHAT)

# Messages that open with thanks or an apology (rule 2).
COURTESY_OPENERS = Lexicon.of(
    "thanks thank thx ty tysm cheers sorry danke vielen dankeschon entschuldigung merci "
    "pardon desole gracias muchas perdon disculpa obrigado obrigada muito valeu desculpa "
    "desculpe grazie scusa scusi bedankt dank sorry dzieki dziekuje przepraszam "
    "ありがとう どうも すみません ごめん 谢谢 感谢 非常感谢 多谢 对不起"
)
COURTESY_MAX_WORDS = 15

# Instruction verbs (imperatives and infinitives, folded): with one of these, thanks or
# an apology in front does not make a message conversation.
TASK_VERBS = Lexicon.of(
    # English
    "create write make find open go navigate visit search look list compute calculate "
    "evaluate download upload fill book buy order summarize summarise extract compare "
    "install run fix build edit delete remove rename sort count convert translate draft "
    "check click copy move save send plan add set change update generate draw fetch get "
    "show tell explain read sign log debug deploy configure schedule print give put type "
    "enter submit reply answer solve "
    # German
    "erstelle erstell schreibe schreib offne offnen finde finden such suche suchen lade "
    "berechne rechne zahle liste fasse ubersetze sortiere vergleiche speichere kopiere "
    "losche benenne fuge gehe geh besuche klicke fulle trage prufe zeige zeig nenne gib "
    "mach mache buche kaufe bestelle sende schicke installiere starte fuhre erklare plane "
    "formuliere "
    # French
    "cree creer ecris ecrire ouvre ouvrir trouve trouver cherche chercher recherche "
    "telecharge telecharger calcule calculer compte resume resumer traduis traduire trie "
    "enregistre copie supprime renomme ajoute visite clique remplis verifie montre donne "
    "dis fais reserve achete commande envoie installe lance explique redige planifie "
    # Spanish
    "crea crear escribe abre busca buscar encuentra descarga calcula cuenta lista traduce "
    "ordena compara guarda borra elimina renombra anade agrega ve haz rellena llena "
    "completa comprueba verifica muestra dame dime reserva compra pide envia instala "
    "ejecuta explica redacta planea entra averigua "
    # Portuguese
    "crie cria criar escreva escreve abra procure pesquise encontre baixe calcule conte "
    "liste resuma traduza ordene salve apague exclua renomeie adicione visite preencha "
    "verifique mostre faca diga compre envie instale execute explique descubra "
    # Italian
    "scrivi apri cerca trova scarica calcola conta elenca riassumi traduci ordina "
    "confronta salva cancella rinomina aggiungi vai clicca compila controlla mostra fai "
    "dimmi dammi prenota invia installa esegui spiega "
    # Dutch
    "maak schrijf zoek vind bereken tel sorteer vergelijk sla kopieer verwijder hernoem "
    "voeg ga bezoek klik vul controleer toon vat vertaal geef boek koop bestel stuur "
    "installeer leg "
    # Polish
    "utworz stworz napisz otworz znajdz wyszukaj pobierz oblicz policz wypisz podsumuj "
    "przetlumacz posortuj porownaj zapisz skopiuj usun zmien dodaj przejdz odwiedz "
    "kliknij wypelnij sprawdz pokaz podaj zarezerwuj kup wyslij zainstaluj uruchom wyjasnij "
    # Japanese
    "作成 作って 開いて 検索 探して ダウンロード 計算 数えて 一覧 要約 翻訳 並べ 比較 保存 "
    "コピー 削除 追加 クリック 入力 確認 表示 書いて 調べて 教えて 送信 "
    # Chinese
    "创建 新建 写 打开 搜索 查找 下载 计算 统计 列出 总结 翻译 排序 比较 保存 复制 删除 "
    "重命名 添加 访问 点击 填写 检查 显示 告诉 提交"
)

ADDRESS = re.compile(
    r"https?://|www\.|(?<![\w.@-])[a-z0-9-]+(\.[a-z0-9-]+)*\."
    r"(com|org|net|io|de|fr|es|it|nl|pl|pt|br|jp|cn|uk|eu|gov|edu|info|app|dev|ai|co|ch|at|be)"
    r"(?![\w-])"
)
FILE_NAME = re.compile(
    r"(^|[^\w/])[\w-]*\.(txt|csv|tsv|json|xml|xlsx?|ods|docx?|md|py|js|ts|sh|zip|tar|gz|"
    r"png|jpe?g|gif|log|html?|yaml|yml|ini|sql|pdf)(?![\w])"
)
ARITHMETIC = re.compile(r"\d\s*[+*×÷^]\s*\d|\d\s+[-/x]\s+\d|(?<!\d)\d+(\s*[,;]?\s+\d+){2,}")

WEB_STRONG = Lexicon.of(
    "website* *website web webpage* webseite* *webseite internetseite* site sites sitio "
    "sito siti page pages pagina* seite seiten *seite strona strone stronie strony "
    "browser* navigateur navegador* link links lien liens enlace* hyperlink* form forms "
    "*formular *formulare formulaire* formulario* formularz* *formulier online internet* "
    "internecie download* herunter* herunterladen telecharg* descarg* baixe baixar scaric* "
    "pobierz pobrac upload* hochladen navigate* browse* click* clique* klick* klik* "
    "clicca kliknij clic wikipedia google github youtube newsletter login signup "
    "ネット サイト ページ ウェブ ブラウザ リンク フォーム ダウンロード ログイン "
    "网站 网页 页面 浏览器 链接 表单 下载 网上 登录"
)
WEB_PHRASES = re.compile(
    r"(?<![\w'])(log in|sign in|sign up|en ligne|en linea|on line|look up|opening hours)(?![\w'])"
)
WEB_WEAK = Lexicon.of(
    "search* suche* such cherche* recherche* busca* buscar pesquis* procur* cerca zoek* "
    "wyszukaj szukaj book booking buche reserve reserver reserva prenota boek zarezerwuj "
    "buy kaufe achete compra compre koop kup order bestelle shop* cart checkout price "
    "prices preis* prix precio* preco* prezzo prijs* cena ceny news nachrichten actualites "
    "noticias notizie nieuws wiadomosci flight* flug* vol vols vuelo* voo voos volo voli "
    "vlucht* lot loty hotel* ticket* billet* billete* bilhete* biglietto* bilet* horaires "
    "horario* orari openingstijden otwarcia "
    "検索 予約 購入 ニュース 搜索 预订 购买 新闻 价格"
)
FILES = Lexicon.of(
    # English
    "file files filename* folder* directory* directories dir csv tsv json xml xlsx xls "
    "spreadsheet* excel script* python bash shell terminal command* code repository repo "
    "git zip unzip tar compute* calculat* sum average mean median column* row rows lines "
    "workspace primes "
    # German
    "datei* *datei *dateien ordner* verzeichnis* tabelle* skript* *skript befehl* rechne "
    "berechne summe durchschnitt mittelwert spalte* zeile* "
    # French
    "fichier* dossier* repertoire* tableur feuille calcul* somme moyenne colonne* lignes "
    "commandes "
    # Spanish
    "archivo* fichero* carpeta* directorio* hoja suma promedio columna* fila filas lineas "
    "codigo comando* "
    # Portuguese
    "arquivo* ficheiro* pasta pastas planilha* soma media coluna* linhas comando* tabuada "
    # Italian
    "cartella cartelle foglio calcol* somma colonna* righe codice "
    # Dutch
    "bestand* *bestand *bestanden map mappen bereken* som gemiddelde kolom* regels "
    "opdracht* "
    # Polish
    "plik* katalog* arkusz* oblicz* policz suma sume srednia* kolumn* linie linii kod "
    "polecen* "
    # Japanese
    "ファイル フォルダ ディレクトリ 表計算 スプレッドシート 計算 合計 平均 列 コード スクリプト "
    "コマンド "
    # Chinese
    "文件 文件夹 目录 表格 电子表格 计算 总和 求和 平均 代码 脚本 命令"
)


@dataclass(frozen=True)
class Classification:
    is_task: bool
    rule: str
    reply: str = ""
    category: str = ""  # one of CATEGORIES for a task, "" for conversation


ELONGATED = re.compile(r"(.)\1{2,}")


def _small_talk_word(word: str) -> bool:
    """A small-talk word, also drawn out ("heyyy", "thanksss", "hiii")."""
    return SMALL_TALK.has_word(word) or any(
        SMALL_TALK.has_word(ELONGATED.sub(keep, word)) for keep in (r"\1", r"\1\1")
    )


def _only_small_talk(latin: list[str], runs: list[str]) -> bool:
    if not all(_small_talk_word(w) for w in latin):
        return False
    for run in runs:
        for entry in SMALL_TALK.cjk:
            run = run.replace(entry, "")
        if any(c not in CJK_FILLER for c in run):
            return False
    return True


def _task_signal(folded: str, latin: list[str], runs: list[str]) -> bool:
    return TASK_VERBS.found_in(latin, runs) or bool(
        ADDRESS.search(folded) or FILE_NAME.search(folded) or ARITHMETIC.search(folded)
    )


def _opens_with_courtesy(latin: list[str], runs: list[str], folded: str) -> bool:
    first = re.search(r"[^\W\d_]", folded)
    if first is None:
        return False
    if _is_cjk(first.group()):
        return bool(runs) and runs[0].startswith(COURTESY_OPENERS.cjk)
    return bool(latin) and COURTESY_OPENERS.has_word(latin[0])


def classify(text: str, *, start_url: str = "") -> Classification:
    """Conversation or task; for a task, its category (``categorize``)."""
    folded = fold(text)
    stripped = META_RE.sub(" ", folded)
    asked_about_arena = stripped != folded
    stripped = CHITCHAT_RE.sub(" ", stripped)
    if _only_small_talk(*_words(stripped)):
        rule = "about_the_arena" if asked_about_arena else "small_talk"
        return Classification(False, rule, CONVERSATION_REPLY)
    latin, runs = _words(folded)
    if (
        _opens_with_courtesy(latin, runs, folded)
        and len(latin) + sum(len(run) for run in runs) // 2 <= COURTESY_MAX_WORDS
        and "?" not in folded
        and not _task_signal(folded, latin, runs)
    ):
        return Classification(False, "small_talk", CONVERSATION_REPLY)
    return Classification(True, "task", category=categorize(text, start_url=start_url))


def categorize(text: str, *, start_url: str = "") -> str:
    """The category of a task's instruction (one of CATEGORIES): its board. Defined for
    any text, so tasks made another way (imports, tournaments) get one too."""
    if start_url:
        return BROWSING
    folded = fold(text)
    latin, runs = _words(folded)
    if ADDRESS.search(folded) or WEB_PHRASES.search(folded) or WEB_STRONG.found_in(latin, runs):
        return BROWSING
    if FILE_NAME.search(folded) or ARITHMETIC.search(folded) or FILES.found_in(latin, runs):
        return FILES_AND_DATA
    if WEB_WEAK.found_in(latin, runs):
        return BROWSING
    return GENERAL
