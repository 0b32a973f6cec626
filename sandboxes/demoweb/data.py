"""The demo web's fixed content and the demo tasks that need it (docs/demo-web.md).

Pure data, no clock and no randomness: every page of the site is a function of what is
here, so a task's expected answer is known in advance and the same on every machine.
The contract this keeps (pages, form fields, wording) is /work/briefs/demo_contract.md
as summarised in docs/demo-web.md; the built-in agents and their tests read the same
module.
"""

import hashlib
import re
from dataclasses import dataclass

HOST = "demo.arena.test"
ORIGIN = f"http://{HOST}"
SITE_NAME = "Demo Town Portal"


@dataclass(frozen=True)
class Article:
    slug: str
    date: str  # ISO 8601, YYYY-MM-DD
    title: str
    author: str
    paragraphs: tuple[str, ...]

    @property
    def path(self) -> str:
        return f"/news/{self.slug}/"


# Newest first (the news page lists them in this order; a test checks it).
ARTICLES: tuple[Article, ...] = (
    Article(
        "spring-market-returns",
        "2026-03-18",
        "Spring Market Returns to Market Hall",
        "Tom Rivers",
        (
            "The spring market opens again at Market Hall on Saturday 21 March, with 46 "
            "stalls of local produce, bread, cheese and plants.",
            "Stallholders from Millbrook and Northgate join the regular traders this year. "
            "The market runs every Saturday from 8:00 to 14:00 until the end of June.",
            "Visitors are asked to come by bus or bicycle: the car park behind the hall is "
            "closed for resurfacing until April.",
        ),
    ),
    Article(
        "millbrook-footbridge-opens",
        "2026-03-11",
        "Millbrook Footbridge Opens to Walkers and Cyclists",
        "Priya Natarajan",
        (
            "The new Millbrook footbridge across the river opened on Tuesday, giving walkers "
            "and cyclists a direct route between Riverside and Old Town for the first time.",
            "The 85-metre steel bridge took fourteen months to build and cost 2.4 million. "
            "It replaces a ferry crossing that stopped running in 2019.",
            "The council expects about 3,000 crossings a day once the spring weather arrives. "
            "Lighting on the bridge stays on from dusk until midnight.",
        ),
    ),
    Article(
        "riverside-library-late-hours",
        "2026-03-03",
        "Riverside Library Extends Its Evening Hours",
        "Hannah Cole",
        (
            "From Monday, Riverside Library stays open until 20:00 on weekdays, two hours "
            "later than before.",
            "The change follows a survey in which most readers asked for evening study space. "
            "The children's corner still closes at 18:00.",
        ),
    ),
    Article(
        "bus-route-7-changes",
        "2026-02-24",
        "Bus Route 7 Changes from 2 March",
        "Samuel Okafor",
        (
            "Route 7 will no longer run along Harbour Road. Buses will use Station Street "
            "instead, with a new stop outside the Community Sports Centre.",
            "The first bus leaves Northgate at 6:10 and the timetable keeps a bus every 15 "
            "minutes during the day.",
            "Printed timetables are available at the Town Hall Service Desk.",
        ),
    ),
    Article(
        "hillcrest-robotics-team",
        "2026-02-15",
        "Hillcrest School Robotics Team Wins Regional Final",
        "Lena Fischer",
        (
            "Six pupils from Hillcrest School won the regional robotics final with a robot "
            "that sorts recycling by material.",
            "The team now travels to the national final in May. They are raising money for "
            "the trip with a stall at the spring market.",
        ),
    ),
    Article(
        "recycling-centre-saturdays",
        "2026-02-06",
        "Recycling Centre Opens on Saturdays",
        "Tom Rivers",
        (
            "The Recycling Centre on Mill Lane now opens on Saturdays from 9:00 to 13:00. "
            "It remains closed on Sundays.",
            "Garden waste, glass, paper and small electrical items are accepted. Large "
            "furniture still needs a collection booked through the Town Hall Service Desk.",
        ),
    ),
    Article(
        "harbour-wall-repairs",
        "2026-01-28",
        "Harbour Wall Repairs Begin Next Month",
        "Samuel Okafor",
        (
            "Repairs to the old harbour wall start in February and should take ten weeks.",
            "The path along the wall will close in sections; the Harbour Fish Market stays "
            "open throughout, with access from Quay Street.",
            "The work is paid for by a regional coastal protection grant.",
        ),
    ),
    Article(
        "lantern-festival-record",
        "2026-01-19",
        "Lantern Festival Draws Record Crowds",
        "Hannah Cole",
        (
            "About 12,000 people walked the lantern trail through Old Town on Saturday "
            "night, the largest crowd since the festival began in 2011.",
            "Volunteers made more than 900 paper lanterns in workshops at the Town Museum.",
        ),
    ),
    Article(
        "museum-old-maps",
        "2026-01-09",
        "Town Museum Opens Exhibition of Old Maps",
        "Lena Fischer",
        (
            "A new exhibition at the Town Museum shows forty maps of Demo Town, the oldest "
            "drawn in 1764.",
            "The maps show how the river was moved twice to make room for the harbour. "
            "Entry is free on the first Sunday of each month.",
            "The exhibition runs until the end of September.",
        ),
    ),
    Article(
        "northgate-pool-reopens",
        "2025-12-30",
        "Northgate Pool Reopens After Refurbishment",
        "Priya Natarajan",
        (
            "Northgate Pool reopened this week after a six-month refurbishment with new "
            "changing rooms and a learner pool.",
            "Early-morning lane swimming starts at 6:30 on weekdays.",
        ),
    ),
)


@dataclass(frozen=True)
class Place:
    name: str
    district: str
    phone: str
    hours: str


# The directory, in the order the page shows it.
DIRECTORY: tuple[Place, ...] = (
    Place("Central Library", "Central", "555-0101", "Mon-Sat 9:00-19:00"),
    Place("Riverside Library", "Riverside", "555-0142", "Mon-Fri 9:00-20:00, Sat 10:00-16:00"),
    Place("Hillcrest Library", "Hillcrest", "555-0117", "Tue-Sat 10:00-17:00"),
    Place("Old Town Library", "Old Town", "555-0163", "Mon-Fri 10:00-18:00"),
    Place("Northgate Pool", "Northgate", "555-0128", "Mon-Fri 6:30-21:00, Sat-Sun 8:00-18:00"),
    Place("Riverside Pool", "Riverside", "555-0135", "Mon-Fri 7:00-20:00, Sat-Sun 9:00-17:00"),
    Place("Town Museum", "Old Town", "555-0150", "Tue-Sat 10:00-17:00, Sun 11:00-16:00"),
    Place("Botanical Garden", "Hillcrest", "555-0156", "Mon-Sun 8:00-18:00"),
    Place("Market Hall", "Central", "555-0109", "Sat 8:00-14:00"),
    Place("Town Hall Service Desk", "Central", "555-0100", "Mon-Fri 8:30-16:30"),
    Place("Recycling Centre", "Millbrook", "555-0171", "Mon-Fri 9:00-17:00, Sat 9:00-13:00"),
    Place(
        "Community Sports Centre", "Northgate", "555-0184", "Mon-Fri 7:00-22:00, Sat-Sun 9:00-18:00"
    ),
    Place("Riverside Bakery", "Riverside", "555-0138", "Mon-Sat 6:00-14:00"),
    Place("Old Town Books", "Old Town", "555-0166", "Mon-Sat 10:00-18:00"),
    Place("Hillcrest Hardware", "Hillcrest", "555-0119", "Mon-Sat 8:00-18:00"),
    Place("Northgate Pharmacy", "Northgate", "555-0125", "Mon-Sat 8:30-19:00"),
    Place("Harbour Fish Market", "Harbour", "555-0190", "Tue-Sat 6:00-12:00"),
    Place("Millbrook Bike Repair", "Millbrook", "555-0177", "Mon-Fri 9:00-18:00"),
    Place("Green Leaf Grocer", "Central", "555-0112", "Mon-Sun 7:00-21:00"),
    Place("Lantern Cafe", "Old Town", "555-0160", "Mon-Sun 8:00-18:00"),
    Place("Riverside Medical Centre", "Riverside", "555-0147", "Mon-Fri 8:00-18:30"),
    Place("Central Post Office", "Central", "555-0104", "Mon-Fri 9:00-17:30, Sat 9:00-12:30"),
    Place("Harbour Ferry Office", "Harbour", "555-0193", "Mon-Sun 7:30-19:00"),
    Place("Millbrook Community Hall", "Millbrook", "555-0179", "Mon-Fri 9:00-22:00"),
)


def directory_search(query: str) -> list[Place]:
    """The directory rows whose name or district contains ``query`` (case-insensitive,
    surrounding spaces ignored); every row for an empty query."""
    needle = query.strip().casefold()
    return [
        place
        for place in DIRECTORY
        if needle in place.name.casefold() or needle in place.district.casefold()
    ]


# opening-hours.csv: a header row, then one row per place.
OPENING_HOURS_HEADER = ("Place", "District", "Weekdays", "Saturday", "Sunday")
OPENING_HOURS: tuple[tuple[str, str, str, str, str], ...] = (
    ("Central Library", "Central", "9:00-19:00", "9:00-19:00", "closed"),
    ("Riverside Library", "Riverside", "9:00-20:00", "10:00-16:00", "closed"),
    ("Hillcrest Library", "Hillcrest", "10:00-17:00", "10:00-17:00", "closed"),
    ("Old Town Library", "Old Town", "10:00-18:00", "closed", "closed"),
    ("Northgate Pool", "Northgate", "6:30-21:00", "8:00-18:00", "8:00-18:00"),
    ("Riverside Pool", "Riverside", "7:00-20:00", "9:00-17:00", "9:00-17:00"),
    ("Town Museum", "Old Town", "10:00-17:00", "10:00-17:00", "11:00-16:00"),
    ("Botanical Garden", "Hillcrest", "8:00-18:00", "8:00-18:00", "8:00-18:00"),
    ("Market Hall", "Central", "closed", "8:00-14:00", "closed"),
    ("Town Hall Service Desk", "Central", "8:30-16:30", "closed", "closed"),
    ("Recycling Centre", "Millbrook", "9:00-17:00", "9:00-13:00", "closed"),
    ("Community Sports Centre", "Northgate", "7:00-22:00", "9:00-18:00", "9:00-18:00"),
)
OPEN_ON_SUNDAY = tuple(row[0] for row in OPENING_HOURS if row[4] != "closed")


def opening_hours_csv() -> str:
    """The CSV download: CRLF line ends (RFC 4180), no field needs quoting."""
    rows = [OPENING_HOURS_HEADER, *OPENING_HOURS]
    return "".join(",".join(row) + "\r\n" for row in rows)


# bin-collection.txt: the second download, plain text a browser shows inline.
BIN_COLLECTION: tuple[tuple[str, str, str], ...] = (
    ("Central", "Monday", "Wednesday"),
    ("Riverside", "Tuesday", "Thursday"),
    ("Hillcrest", "Wednesday", "Friday"),
    ("Old Town", "Monday", "Thursday"),
    ("Northgate", "Tuesday", "Friday"),
    ("Harbour", "Wednesday", "Monday"),
    ("Millbrook", "Thursday", "Tuesday"),
)


def bin_collection_txt() -> str:
    lines = [
        "Demo Town household collections, 2026",
        "",
        "District     General waste   Recycling",
        *(
            f"{district:<12} {general:<15} {recycling}"
            for district, general, recycling in BIN_COLLECTION
        ),
        "",
        "Put bins out by 7:00 on the collection day. Questions: Town Hall Service Desk, 555-0100.",
    ]
    return "\n".join(lines) + "\n"


# The contact form.
TOPICS = ("General", "Billing", "Technical")
NAME_MAX_CHARS, EMAIL_MAX_CHARS, MESSAGE_MAX_CHARS = 100, 200, 2000
_EMAIL_RE = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


def email_valid(email: str) -> bool:
    return bool(_EMAIL_RE.fullmatch(email))


def contact_fields(name: str, email: str, topic: str, message: str) -> tuple[str, ...]:
    """The values as the site keeps them: surrounding spaces dropped, the textarea's
    CRLF line ends as LF."""
    return (name.strip(), email.strip(), topic.strip(), message.replace("\r\n", "\n").strip())


def reference_number(name: str, email: str, topic: str, message: str) -> str:
    """The confirmation's reference: "REF-" and the first 6 hex digits (upper case) of
    the SHA-256 of the kept values joined by LF. Same values, same reference."""
    joined = "\n".join(contact_fields(name, email, topic, message))
    return "REF-" + hashlib.sha256(joined.encode()).hexdigest()[:6].upper()


# --- the demo tasks ----------------------------------------------------------------

_NEWEST = ARTICLES[0]
_CLOSED_ON_SUNDAY = tuple(row[0] for row in OPENING_HOURS if row[4] == "closed")
_CONTACT = ("Ada Lovelace", "ada@example.org", "Technical", "The map page is broken")

# Phrased as a person would ask. ``expected``: strings a correct final answer contains,
# every one of them (see answer_matches); ``category`` is the task board it counts for.
DEMO_TASKS: list[dict] = [
    {
        "instruction": (
            f"Go to {ORIGIN}/news/ and tell me the title and date of the newest article."
        ),
        "start_url": f"{ORIGIN}/news/",
        "category": "browsing",
        "expected": [_NEWEST.title, _NEWEST.date],
    },
    {
        "instruction": (
            "Find the phone number of the Riverside Library in the directory at "
            f"{ORIGIN}/directory/."
        ),
        "start_url": f"{ORIGIN}/directory/",
        "category": "browsing",
        "expected": ["555-0142"],
    },
    {
        "instruction": (
            f"Use the contact form at {ORIGIN}/contact/ to send a message: name Ada "
            "Lovelace, email ada@example.org, topic Technical, message 'The map page is "
            "broken'. Tell me the reference number you get."
        ),
        "start_url": f"{ORIGIN}/contact/",
        "category": "browsing",
        "expected": [reference_number(*_CONTACT)],
    },
    {
        "instruction": (
            f"Download the opening hours CSV from {ORIGIN}/downloads/ and tell me how many "
            "places are listed in it."
        ),
        "start_url": f"{ORIGIN}/downloads/",
        "category": "files_and_data",
        "expected": [str(len(OPENING_HOURS))],
    },
    {
        "instruction": (
            f"Open the article about the new footbridge on {ORIGIN}/news/ and summarise it "
            "in one sentence."
        ),
        "start_url": f"{ORIGIN}/news/",
        "category": "browsing",
        "expected": ["footbridge"],
    },
    {
        "instruction": (
            f"Save the file {ORIGIN}/downloads/opening-hours.csv in the workspace as "
            "hours.csv and tell me which of the places in it are closed on Sundays."
        ),
        "start_url": "",
        "category": "files_and_data",
        "expected": list(_CLOSED_ON_SUNDAY),
    },
    {
        "instruction": (
            f"Check the bin collection schedule at {ORIGIN}/downloads/bin-collection.txt: "
            "on which day is recycling collected in Riverside?"
        ),
        "start_url": "",
        "category": "files_and_data",
        "expected": ["Thursday"],
    },
]


def answer_matches(task: dict, answer: str) -> bool:
    """Whether ``answer`` contains every one of ``task["expected"]``: case-insensitive,
    runs of white space as one space, each expected string bounded by non-word
    characters (so "12" is not found in "2012" nor "555-0142" in "555-01420")."""
    text = " ".join(answer.split()).casefold()
    for expected in task["expected"]:
        needle = re.escape(" ".join(expected.split()).casefold())
        if not re.search(rf"(?<!\w){needle}(?!\w)", text):
            return False
    return True
