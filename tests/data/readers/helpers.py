"""Helpers shared by the reader tests."""

from __future__ import annotations

from pathlib import Path

from tokenmill.config import SourceConfig


def files_source(path, bucket="web", **kw) -> SourceConfig:
    """A kind=files source over `path`."""
    return SourceConfig(kind="files", path=str(path), bucket=bucket, **kw)


REAL_DEDICATIONS = Path("/work/real_corpora/short_text/debian-dedications")
# (language, file under REAL_DEDICATIONS, the encoding it is stored in there)
_PASSAGE_FILES = {"fr": ("fr/dedication-5.0.txt", "utf-8"), "de": ("de/dedication-9.0.txt", "utf-8"),
                  "ja": ("ja/dedication-9.0.txt", "utf-8"), "zh": ("zh-cn/dedication-2.2.txt", "gb18030"),
                  "ru": ("ru/dedication-9.0.txt", "utf-8"), "es": ("es/dedication-9.0.txt", "utf-8")}
# When the real corpora are not installed: short passages in the same languages.
_FALLBACK = {
    "fr": "Le projet a perdu un ami et développeur très cher. Pendant la plus grande partie de sa vie, "
          "il a combattu une maladie grave ; son dévouement au projet est un modèle d'inspiration pour "
          "nous tous, et ne sera jamais oublié. Cette version lui est dédiée, à sa manière, directe et "
          "pleine d'humour : « Merci pour tout ».",
    "de": "Der Gründer des Projektes starb am 28. Dezember in seinem Haus. Es ist schwierig, seinen "
          "Beitrag zu Freier Software zu hoch zu bewerten. Er führte das Projekt seit seiner Gründung "
          "und schrieb das „Manifest“, das die Gemeinschaft bis heute prägt; über dreihundert "
          "Distributionen stammen davon ab. Wir widmen ihm diese Veröffentlichung – für immer dankbar.",
    "ja": "プロジェクトの創始者は二〇一五年十二月二十八日に自宅で世を去った。四十二歳だった。"
          "フリーソフトウェアに対する彼の貢献は強調しすぎることはない。その始まりからプロジェクトを率い、"
          "在学期間を通して雛鳥であったプロジェクトを育てあげた。故にこのリリースを彼に捧げる。",
    "zh": "二〇〇〇年七月十一日，本项目及整个自由软件社区失去了一位亲爱的朋友和开发者。他一生中的大部分时间"
          "一直在和一种叫做肌营养不良症的疾病作斗争。作为开发者，他在大部分时间里卧病在床。他对本项目的卓越"
          "贡献，是对我们所有人的激励，我们将永远不会忘记他。谨以此版本献给他。",
    "ru": "Основатель проекта умер в своём доме в Сан-Франциско. Ему было сорок два года. Трудно "
          "переоценить его вклад в свободное программное обеспечение. Он руководил проектом с самого "
          "начала и написал манифест, который определяет сообщество до сих пор. Мы посвящаем ему этот выпуск.",
    "es": "El fundador del proyecto falleció en su casa el 28 de diciembre. Tenía cuarenta y dos años. "
          "Es difícil sobreestimar su contribución al software libre: dirigió el proyecto desde su "
          "creación, escribió el manifiesto y cuidó la comunidad durante sus años de universidad. "
          "Por ello, dedicamos esta versión a él, con nuestro más sincero agradecimiento.",
}


def passages() -> dict[str, str]:
    """Real multilingual prose (Debian's release dedications) by language, or the short passages
    above when the real corpora are not installed."""
    if not all((REAL_DEDICATIONS / rel).is_file() for rel, _ in _PASSAGE_FILES.values()):
        return dict(_FALLBACK)
    return {lang: (REAL_DEDICATIONS / rel).read_bytes().decode(enc) for lang, (rel, enc) in _PASSAGE_FILES.items()}
