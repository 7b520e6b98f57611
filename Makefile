# Two commands a newcomer needs: `make lab` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: lab formgrader test release release-exchange collect autograde feedback return-feedback grades analytics benchmark checkpoint cleanup clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 required"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[course,test]'
	touch $(STAMP)

# Your own working copy (my-work/ch12, git-ignored), created on first use, never overwritten.
lab: $(STAMP)
	$(BIN)/course lab

# Instructors: formgrader, served from the course folder (where nbgrader_config.py is).
formgrader: $(STAMP)
	$(BIN)/course formgrader

# End the checkpoint workers and suppliers started from this course folder (nobody else's).
cleanup: $(STAMP)
	$(BIN)/course cleanup

test: $(STAMP)
	$(BIN)/python -m pytest

# --- instructor jobs (see README, "For instructors") ---
release: $(STAMP)
	$(BIN)/course release

# The exchange (nbgrader_config.py: exchange/ here, or $COURSE_EXCHANGE on a hub): learners fetch the
# assignment and submit from the Assignments tab; collect copies their submissions into submitted/.
release-exchange: $(STAMP)
	$(BIN)/nbgrader release_assignment ch12 --force

collect: $(STAMP)
	$(BIN)/nbgrader collect ch12 --update

# JOBS=N students at once (default: one per core); FORCE=1 grades again the students the gradebook
# already holds; DB_URL=postgresql://... for a gradebook on a server.
JOBS ?=
FORCE ?=
DB_URL ?=
DB_OPTION = $(if $(DB_URL),--db-url '$(DB_URL)')
autograde: $(STAMP)
	$(BIN)/course autograde $(if $(JOBS),--jobs $(JOBS)) $(if $(FORCE),--force) $(if $(STUDENT),--student $(STUDENT)) $(DB_OPTION)

feedback: $(STAMP)
	$(BIN)/course feedback $(DB_OPTION)

# Feedback HTML into the exchange, for learners to fetch from the Assignments tab.
return-feedback: $(STAMP)
	$(BIN)/nbgrader release_feedback ch12

GRADES ?= grades.csv
grades: $(STAMP)
	$(BIN)/course grades --output '$(GRADES)' $(DB_OPTION)

# What the class got wrong: analytics/ch12-checks.csv, .png and .html, from the gradebook.
analytics: $(STAMP)
	$(BIN)/course analytics $(DB_OPTION)

checkpoint: $(STAMP)
	$(BIN)/python checkpoints/ch12_worker_recovery_checkpoint.py --evidence

benchmark: $(STAMP)
	$(BIN)/python benchmarks/claim_benchmark.py

clean:
	rm -rf $(VENV) submitted autograded feedback gradebook.db
